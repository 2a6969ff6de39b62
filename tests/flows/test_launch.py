"""The launcher leaves no process behind, whatever ends the run, and quotes the last lines on failure.

Prefect-free: these run the real subprocess machinery against tests/flows/dummy_job.py, a child that forks
grandchildren (like torchrun forks ranks) which would survive a plain ``proc.kill()``.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from flows.launch import LaunchEnd, LaunchResult, Watch, group_alive, run_process
from tests.flows.prefect_api import alive

DUMMY = str(Path(__file__).with_name("dummy_job.py"))


def _pids(pidfile: Path) -> list[int]:
    return [int(p) for p in pidfile.read_text().split()]


def _run(tmp_path: Path, *args: str, **kw) -> tuple[LaunchResult, list[int], list[str]]:
    pidfile = tmp_path / "pids"
    seen: list[str] = []
    res = run_process([sys.executable, DUMMY, "--pidfile", str(pidfile), *args], watch=Watch(on_line=seen.append, **kw))
    return res, _pids(pidfile), seen


def test_success_streams_every_line(tmp_path):
    res, pids, seen = _run(tmp_path, "--lines", "4", log_file=tmp_path / "job.log")
    assert res.ok and res.returncode == 0 and res.reason == LaunchEnd.EXITED
    assert [s for s in seen if s.startswith("step")] == [f"step {i} loss {10 / (i + 1):.3f}" for i in range(4)]
    assert (tmp_path / "job.log").read_text().count("step") == 4
    assert not any(alive(p) for p in pids)


def test_nonzero_exit_quotes_last_lines(tmp_path):
    res, _, _ = _run(tmp_path, "--lines", "50", "--exit-code", "3", tail_lines=5)
    assert not res.ok and res.returncode == 3
    assert res.tail[-1] == "RuntimeError: rank 0 diverged (exit 3)"
    text = res.describe()
    assert "exited with code 3. Last 5 lines:" in text
    assert "step 49 loss" in text and "step 45" not in text and text.endswith("diverged (exit 3)")


def test_cancel_kills_grandchildren(tmp_path):
    pidfile = tmp_path / "pids"
    t0 = time.monotonic()
    res = run_process(
        [sys.executable, DUMMY, "--pidfile", str(pidfile), "--grandchildren", "2", "--hang"],
        watch=Watch(on_line=lambda _: None, should_stop=pidfile.exists, stop_check_s=0.2, grace_s=5),
    )
    pids = _pids(pidfile)
    assert res.reason == LaunchEnd.CANCELLED and not res.ok
    assert len(pids) >= 5  # the job, 2 bash, 2 sleep
    assert not any(alive(p) for p in pids), [p for p in pids if alive(p)]
    assert not group_alive(pids[0])
    assert time.monotonic() - t0 < 20


def test_timeout_escalates_to_sigkill(tmp_path):
    # The job and its grandchildren ignore SIGTERM: only the SIGKILL after the grace period ends them.
    res, pids, seen = _run(tmp_path, "--grandchildren", "1", "--hang", "--ignore-term", timeout_s=2.5, grace_s=1)
    assert res.reason == LaunchEnd.TIMEOUT and "timed out" in res.describe()
    assert not any(alive(p) for p in pids)
    assert any("terminating process group" in s for s in seen)


def test_orphans_left_by_a_finished_job_are_killed(tmp_path):
    # The leader exits 0 while its grandchildren still hold the output pipe: no hang, no leftovers.
    t0 = time.monotonic()
    res, pids, _ = _run(tmp_path, "--grandchildren", "2", grace_s=5)
    assert res.returncode == 0 and time.monotonic() - t0 < 15
    assert not any(alive(p) for p in pids)


class _Terminated(BaseException):
    """Stands in for Prefect's TerminationSignal (a BaseException raised in the main thread on SIGTERM)."""


def test_exception_in_the_caller_still_kills_the_group(tmp_path):
    pidfile = tmp_path / "pids"

    def stop():
        if pidfile.exists():
            raise _Terminated()
        return False

    with pytest.raises(_Terminated):
        run_process([sys.executable, DUMMY, "--pidfile", str(pidfile), "--grandchildren", "2", "--hang"],
                    watch=Watch(on_line=lambda _: None, should_stop=stop, stop_check_s=0.2, grace_s=5))
    assert not any(alive(p) for p in _pids(pidfile))
    assert os.path.exists(pidfile)


def test_a_job_that_never_stops_printing_can_still_be_cancelled(tmp_path):
    flag = tmp_path / "stop"
    res = run_process(["bash", "-c", "while true; do echo spam; done"],
                      watch=Watch(on_line=lambda _: None, should_stop=lambda: flag.exists() or flag.touch() or False,
                                  stop_check_s=0.5, timeout_s=30, grace_s=2))
    assert res.reason == LaunchEnd.CANCELLED and res.seconds < 10
