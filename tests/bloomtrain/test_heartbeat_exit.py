"""An agent exits with its decision's code, never SIGABRT, however its heartbeat thread is timed.

The heartbeat (bloomtrain.agent.Heartbeat) is a daemon thread that calls the rendezvous store (C++, the GIL
released). If such a call returns while the interpreter finalizes, Python ends the thread with
``pthread_exit`` inside pybind11's GIL guard and the process aborts: "terminate called without an active
exception", exit -6 where the launcher meant 2. CI saw it twice (a full disk, a lost node), under load.

Here a child process makes the window wide and certain: its heartbeat beats without a pause, each store call a
200 ms ``wait`` on a real TCPStore, and an object freed at finalization sleeps 1 s. Without ``stop`` the child
aborts (the control: this test reproduces the failure), with ``stop`` it exits 2.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # tests/tiers.py

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import datetime, sys, time
import torch.distributed as dist
from bloomtrain import agent
from bloomtrain.agent import Heartbeat

agent.BEAT_S = 0.001  # beat at once again: the thread is nearly always inside a store call

class SlowStore:  # every heartbeat call spends 200 ms in C++ with the GIL released
    def __init__(self):
        self.store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=30))
    def add(self, key, value):
        try:
            self.store.wait(["never"], datetime.timedelta(milliseconds=200))
        except Exception:
            pass
        return 0

class SlowToFree:  # module teardown sleeps (GIL released) while the heartbeat's call returns
    def __del__(self, sleep=time.sleep):  # bound now: teardown may clear the module global first
        sleep(1.0)

beat = Heartbeat("n1")
beat.use(SlowStore())
slow = SlowToFree()
time.sleep(0.5)
if sys.argv[1] == "stop":
    assert beat.stop()
sys.exit(2)
"""


def _child(mode: str) -> subprocess.CompletedProcess:
    env_cmd = [sys.executable, "-c", CHILD, mode]
    return subprocess.run(env_cmd, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "TORCH_CPP_LOG_LEVEL": "ERROR"})


def test_a_stopped_heartbeat_lets_the_agent_exit_with_its_code():
    control = _child("no-stop")
    assert control.returncode == -signal.SIGABRT, (control.returncode, control.stderr[-2000:])
    assert "terminate called without an active exception" in control.stderr
    stopped = _child("stop")
    assert stopped.returncode == 2, (stopped.returncode, stopped.stderr[-2000:])
