"""``make demo``'s console, as a user's terminal shows it (tests/harness/demo_run.py: the demo at small sizes, every
per-language table still 10 rows long, on a pseudo-terminal), and what left it.

- At most 120 lines (305 before flows.console), and no line of another library's INFO output: Prefect-format
  lines from any logger but the runs', DeepSpeed's log lines and layer listing, its accelerator warning,
  transformers' "Loading weights" bars, Dask's hints. Every warning once.
- Each stage's start and end line, a progress bar for cleaning, tokenizing, training and evaluation, the clean
  summary and the bits-per-byte tables.
- What left the console is in OUT/logs/demo.log: Dask's INFO lines, DeepSpeed's listing and warning, the
  training's iteration lines.
- The last lines say how to open the runs in the Prefect UI, with the pipeline run's link.
- The model card in OUT/hf holds no path of this machine and names the model after the run.
- ``--verbose`` and ``LOG_LEVEL=DEBUG`` bring the libraries' output back (flows.console.setup in a subprocess).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import ModelCard

MAX_LINES = 120
STAGES = ("clean", "tokenizer", "dataset", "blend", "train", "export", "evaluate")
ROOT = Path(__file__).resolve().parents[2]
# Prefect's console format: "15:01:28.598 | INFO    | distributed.scheduler - State start"
PREFECT_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3} \| (?P<level>[A-Z]+) +\| (?P<who>.+?) - (?P<msg>.*)$")
RUNS = ("Flow run '", "Task run '")  # the runs' own loggers: a stage's lines
THIRD_PARTY = (
    re.compile(r"\[\d{4}-\d\d-\d\d [\d:,]+\] \[INFO\]"),  # DeepSpeed's logger
    re.compile(r"- +\d+: (_passthrough|EmbeddingPipe|BloomTransformerLayerPipe|FinalLayerNorm)$"),  # its layer list
    re.compile(r"Using topology: |SEED_LAYERS=|stage=\d+ layers=\d+"),
    re.compile(r"Setting accelerator to CPU"),
    re.compile(r"^Loading weights"),  # transformers' bars
    re.compile(r"jupyter-server-proxy|Register worker|Lost all workers"),  # Dask
)
BAR = re.compile(r"^(?P<what>[a-z ]+): +100%\|")  # a tqdm bar at its end


def third_party_info(line: str) -> bool:
    m = PREFECT_LINE.match(line)
    return (bool(m and m["level"] == "INFO" and not m["who"].startswith(RUNS))
            or any(p.search(line) for p in THIRD_PARTY))


@pytest.mark.integration
def test_make_demo_prints_its_stages_in_at_most_120_lines(demo_run):
    lines = demo_run.lines
    print(f"make demo (small sizes): {len(lines)} lines on the terminal, {demo_run.seconds:.0f} s")
    assert len(lines) <= MAX_LINES, "\n".join(lines)
    assert not [x for x in lines if third_party_info(x)], [x for x in lines if third_party_info(x)]
    warnings = [m["msg"] for x in lines if (m := PREFECT_LINE.match(x)) and m["level"] in ("WARNING", "ERROR")]
    assert len(warnings) == len(set(warnings)), warnings  # each once

    runs = [m["msg"] for x in lines if (m := PREFECT_LINE.match(x)) and m["who"].startswith("Flow run '")]
    begun = [re.search(r"for flow '([\w-]+)'$", msg).group(1) for msg in runs if msg.startswith("Beginning ")]
    assert begun == ["bloom-pipeline", *(f"bloom-{stage}" for stage in STAGES)]  # flows named bloom-...
    assert runs.count("Finished in state Completed()") == len(begun)
    assert not [x for x in lines if "View at http" in x]  # links to a server that is gone when the demo ends
    bars = {m["what"] for x in lines if (m := BAR.match(x))}
    assert {"filter", "tokenize", "train", "evaluate exported"} <= bars, bars
    text = "\n".join(lines)
    assert "language   docs in      kept" in text and text.count("overall ") >= 2  # clean and bits-per-byte tables

    link = re.search(r"http://127\.0\.0\.1:4200/runs/flow-run/[0-9a-f-]{36}$", lines[-1])
    assert link and f"`python -m flows.ui --out {demo_run.out}`" in lines[-2], lines[-3:]

    log = (demo_run.out / "logs" / "demo.log").read_text()
    moved = ["distributed.scheduler", "Register worker", "EmbeddingPipe"]
    if "DS_ACCELERATOR" not in os.environ:  # DeepSpeed warns only when it guesses; DS_ACCELERATOR=cpu: no warning
        moved.append("Setting accelerator to CPU")
    for line in moved:
        assert line in log, line
    assert re.search(r"iter \d+/12 \|", log)  # the training's iteration lines (the bar showed them)


@pytest.mark.integration
def test_the_demo_card_holds_no_path_of_this_machine(demo_run):
    out = demo_run.out.resolve()
    card = (out / "hf" / "README.md").read_text()
    assert str(out) not in card and str(out.parent) not in card, \
        [x for x in card.splitlines() if str(out.parent) in x]
    assert ModelCard(card).data.model_name == "bloomstack-demo"  # the run's name, not the folder's ("hf")
    assert "the blend `../blend/blend.yaml`" in card and "`../train/checkpoints`, tag `global_step12`" in card


SETUP = """
import logging, sys
from flows.console import job_line, setup
setup(sys.argv[1], "probe", verbose=sys.argv[2] == "1")
logging.getLogger("distributed.scheduler").setLevel(logging.INFO)
logging.getLogger("distributed.scheduler").info("Register worker addr: tcp://127.0.0.1:1")
logging.getLogger("distributed.nanny").warning("Worker process still alive after 4.0 seconds, killing")
logging.getLogger("distributed.nanny").warning("Worker process still alive after 4.0 seconds, killing")
# DeepSpeed's logger as deepspeed.utils.logging makes it: its own stdout handler, no propagation
ds = logging.getLogger("DeepSpeed")
ds.addHandler(logging.StreamHandler(sys.stdout)); ds.propagate = False; ds.setLevel(logging.INFO)
ds.warning("Setting accelerator to CPU. If you have GPU or other accelerator, we were unable to detect it.")
ds.info("DeepSpeed info line")
print("job line on console:", job_line("     1: EmbeddingPipe")[1], job_line("bloomtrain: precision: fp32")[1])
"""


def _probe(tmp_path: Path, name: str, verbose: bool, env: dict[str, str]) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-c", SETUP, str(tmp_path / name), "1" if verbose else "0"],
                          env={**os.environ, **env}, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr, (tmp_path / name / "logs" / "probe.log").read_text()


@pytest.mark.integration
def test_verbose_or_log_level_debug_brings_the_libraries_output_back(tmp_path):
    quiet, quiet_log = _probe(tmp_path, "quiet", False, {"LOG_LEVEL": "INFO"})
    assert "Register worker" not in quiet and "Setting accelerator" not in quiet and "DeepSpeed info" not in quiet
    assert quiet.count("Worker process still alive") == 1  # a warning, once
    assert "job line on console: False True" in quiet
    for line in ("Register worker", "Setting accelerator to CPU", "DeepSpeed info line"):
        assert line in quiet_log, line
    for name, verbose, env in (("verbose", True, {}), ("debug", False, {"LOG_LEVEL": "DEBUG"})):
        loud, _ = _probe(tmp_path, name, verbose, env)
        assert "Register worker" in loud and "Setting accelerator to CPU" in loud and "DeepSpeed info line" in loud
        assert loud.count("Worker process still alive") == 2 and "job line on console: True True" in loud
