"""``make ui`` after ``make demo`` (the session's small demo, tests/harness/demo_run.py): the Prefect UI on the database
the demo kept in its output folder, opened in headless Chromium (Debian's package) at the link the demo printed.

Checked: ``make ui`` prints the UI's address and the last pipeline run's link, the same run the demo's last line
named; that flow-run page loads and shows the pipeline (bloom-pipeline, Completed) with its subflows: the run
graph draws them (the screenshot, kept as a test artifact) and the Subflow Runs tab lists each stage's flow
and run name, as the API reports them; Ctrl-C stops the server and leaves nothing running.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.harness.chromium import page

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("TEST_ARTIFACTS", ROOT / "test-artifacts"))
STAGES = tuple(f"bloom-{stage}" for stage in ("clean", "tokenizer", "dataset", "blend", "train", "export", "evaluate"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _subflows(api: str) -> dict[str, str]:
    """Flow name -> run name of every run the demo recorded but the pipeline itself."""
    flows = {f["id"]: f["name"] for f in httpx.post(f"{api}/flows/filter", json={}, timeout=30).json()}
    runs = httpx.post(f"{api}/flow_runs/filter", json={}, timeout=30).json()
    return {flows[r["flow_id"]]: r["name"] for r in runs if flows[r["flow_id"]] != "bloom-pipeline"}


@pytest.mark.integration
def test_make_ui_serves_the_demo_runs_to_a_browser(demo_run, tmp_path):
    port = _free_port()
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home")}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen(["make", "--no-print-directory", "ui", f"DEMO_OUT={demo_run.out}",
                             f"UI_ARGS=--port {port}"],
                            cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=_as_at_a_terminal)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(x.rstrip("\n") for x in proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 240
        while not any("the pipeline's last run: " in x for x in lines):
            assert proc.poll() is None and time.monotonic() < deadline, lines
            time.sleep(0.5)
        link = next(x for x in lines if "the pipeline's last run: " in x).split("the pipeline's last run: ")[1]
        printed = re.search(r"/runs/flow-run/[0-9a-f-]{36}$", demo_run.lines[-1]).group(0)
        assert link == f"http://127.0.0.1:{port}{printed}"  # the run the demo named, where the demo said
        subflows = _subflows(f"http://127.0.0.1:{port}/api")
        assert sorted(subflows) == sorted(STAGES)
        t0 = time.monotonic()
        with page(link, tmp_path / "chromium") as ui:
            ui.wait_for_text(["bloom-pipeline", "Completed", "Subflow Runs"])
            time.sleep(3)  # the run graph is a canvas: let it draw the subflows' bars before the screenshot
            shot = ui.screenshot(ARTIFACTS / "prefect-ui-bloom-pipeline.png")
            ui.click_text("Subflow Runs")
            ui.wait_for_text([f"{len(STAGES)} Flow runs", *STAGES, *subflows.values()])
        print(f"Prefect UI: the flow-run page and its subflows in {time.monotonic() - t0:.1f} s; screenshot {shot}")
        assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000
    finally:
        started = [proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))] \
            if proc.poll() is None else [proc.pid]
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at the terminal
        proc.wait(timeout=60)
        reader.join(timeout=10)
    time.sleep(1)
    assert not [p for p in started if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def _as_at_a_terminal() -> None:
    """Ctrl-C reaches a command started at a terminal; a pytest started in the background of a script (``cmd &``)
    hands its children SIGINT ignored (POSIX), and `make ui` then never stopped (60 s timeout)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_without_a_demo_database_flows_ui_says_what_to_run(tmp_path, capsys):
    from flows.ui import main

    assert main(["--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"flows.ui: error: --out {tmp_path}: no Prefect database at {tmp_path}/prefect/prefect.db; run `make demo` "
        f"(python -m flows.demo --out {tmp_path}) first")


def test_the_demos_last_lines_point_at_its_runs():
    from flows.demo import ui_lines

    assert ui_lines("demo_out", "r1", None).splitlines()[1:] == [
        "The runs in the Prefect UI: `make ui` serves it on demo_out's database; the pipeline's run is then at",
        "  http://127.0.0.1:4200/runs/flow-run/r1"]
    assert "`python -m flows.ui --out runs/x` serves it on runs/x's database" in ui_lines("runs/x", "r1", None)
    assert ui_lines("demo_out", "r1", "http://prefect.lab:4200").splitlines()[1:] == [
        "The runs are on your Prefect server: http://prefect.lab:4200/runs/flow-run/r1"]
