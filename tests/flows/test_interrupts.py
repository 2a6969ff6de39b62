"""Ctrl-C during ``python -m flows.demo``'s training, as a terminal sends it: SIGINT to the whole process group.

The demo runs as a user starts it (its own temporary Prefect server, Dask, bloomtrain.launcher with 2 ranks)
on two languages of the demo corpus, with a training long enough to be interrupted. Checked: the training
saved (every rank's exit record says it stopped on the signal, at the checkpoint ``latest`` names); the
command exits within 30 s with exactly one line (the train stage, that checkpoint, rerun to resume) and no
traceback; and no process it started is left: the flow, the Prefect server (in a session of its own), the
launcher and its ranks (sessions of their own too), Dask.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from bloomtrain.checkpoint.tags import read_latest
from bloomtrain.exit_record import attempts, read_attempt
from flows.config import DEMO_CORPUS

pytestmark = pytest.mark.integration  # tests/tiers.py

ROOT = Path(__file__).resolve().parents[2]


def _corpus(tmp_path: Path, docs: int = 150) -> Path:
    """The first ``docs`` documents of the demo's en and fr files, in one jsonl."""
    out = tmp_path / "corpus.jsonl"
    with out.open("w", encoding="utf-8") as f:
        for lang in ("en", "fr"):
            with gzip.open(DEMO_CORPUS / f"{lang}.jsonl.gz", "rt", encoding="utf-8") as src:
                for _, line in zip(range(docs), src):
                    f.write(line)
    return out


def _iterations(metrics: Path) -> int:
    if not metrics.exists():
        return 0
    return sum('"loss"' in line for line in metrics.read_text().splitlines())


def test_ctrl_c_during_training_saves_and_exits_in_one_line_leaving_nothing(tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PYTHONUNBUFFERED": "1"}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-m", "flows.demo", "--corpus", str(_corpus(tmp_path)), "--out", str(out),
                             "--workers", "1", "--train-iters", "100000"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[tuple[float, str]] = []
    reader = threading.Thread(target=lambda: lines.extend((time.monotonic(), x.rstrip("\n")) for x in proc.stdout))
    reader.start()
    try:
        deadline = time.monotonic() + 480
        while _iterations(out / "train" / "logs" / "metrics.jsonl") < 3:
            assert proc.poll() is None and time.monotonic() < deadline, [x for _, x in lines][-30:]
            time.sleep(0.5)
        started = [proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))]
        sent = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(timeout=10)
    after = [x for t, x in lines if t >= sent]
    latest = read_latest(out / "train" / "checkpoints")
    assert proc.returncode == 130 and took < 30, (proc.returncode, took, after)
    assert after == [f"flows.demo: interrupted during the train stage (the training saved {latest}); run the same "
                     "command again to resume there"], after
    assert not any("Traceback" in x for _, x in lines)
    assert latest is not None and int(latest.removeprefix("global_step")) >= 3
    exits = max((out / "train" / "exits").iterdir())
    records = read_attempt(exits, attempts(exits)[-1]).ranks.values()
    assert [(r.kind, r.checkpoint) for r in records] == [("signal", latest)] * 2, records
    time.sleep(1)  # the kernel reaps the last members of killed groups
    assert not [p for p in started if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    print(f"interrupted {took:.1f} s after SIGINT: {after[0]}")
