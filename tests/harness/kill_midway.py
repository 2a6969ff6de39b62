"""Kill a CLI run midway: start it in its own session, wait until its completion markers show enough progress,
SIGKILL the whole session (the CLI and its LocalCluster workers), and report what was marked done."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def kill_after_markers(cmd: list[str], markers: Path, count: int = 3, timeout_s: float = 120.0) -> int:
    """Run ``cmd`` from the repository root until ``markers`` holds ``count`` ``*.done.json`` files (or
    ``timeout_s`` passed), then SIGKILL its session; returns the markers left. Fails when the run exits first."""
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + timeout_s
        while len(list(markers.glob("*.done.json"))) < count and time.time() < deadline:
            assert proc.poll() is None, "the run exited before it could be killed"
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the run and its LocalCluster workers (one session)
        proc.wait(30)
    return len(list(markers.glob("*.done.json")))
