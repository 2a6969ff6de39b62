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

from flows.launch import (
    LaunchResult,
    WorkerFailure,
    failure_excerpt,
    group_alive,
    run_process,
    watch_torchrun,
)
from tests.flows.prefect_api import alive

DUMMY = str(Path(__file__).with_name("dummy_job.py"))


def _pids(pidfile: Path) -> list[int]:
    return [int(p) for p in pidfile.read_text().split()]


def _run(tmp_path: Path, *args: str, **kw) -> tuple[LaunchResult, list[int], list[str]]:
    pidfile = tmp_path / "pids"
    seen: list[str] = []
    res = run_process([sys.executable, DUMMY, "--pidfile", str(pidfile), *args], on_line=seen.append, **kw)
    return res, _pids(pidfile), seen


def test_success_streams_every_line(tmp_path):
    res, pids, seen = _run(tmp_path, "--lines", "4", log_file=tmp_path / "job.log")
    assert res.ok and res.returncode == 0 and res.reason == "exited"
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


def test_torchrun_report_does_not_crowd_out_the_ranks_last_lines():
    lines = [f"step {i}" for i in range(10)] + ["ValueError: bad shard 7"]
    lines += ["E1122 03:46:27.979000 12376 torch/distributed/elastic/multiprocessing/api.py:1002] failed"]
    lines += ["Traceback (most recent call last):"] + ["  frame"] * 30 + [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "Root Cause (first observed failure):",
        "[0]:", "  rank      : 0 (local_rank: 0)", "  exitcode  : 1 (pid: 12330) ", "=" * 60]
    got = failure_excerpt(lines, 3)
    assert got == ["step 8", "step 9", "ValueError: bad shard 7",
                   "[torchrun root cause] rank      : 0 (local_rank: 0) | exitcode  : 1 (pid: 12330)"]
    assert failure_excerpt(["a", "b", "c"], 2) == ["b", "c"]


# torchrun's own words (torch 2.13) around a worker group that failed, was restarted, and failed for good
AGENT = "{}1124 09:04:07.408000 8273 /v/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/api.py"
SIGTERM = AGENT.format("W") + ":1028] Sending process 8310 closing signal SIGTERM"
FAILED = AGENT.format("E") + ":1002] failed (exitcode: {}) local_rank: 1 (pid: {}) of binary: /v/bin/python"
REPORT = ["Traceback (most recent call last):", "  frame", "torch.distributed.elastic.multiprocessing.errors."
          "ChildFailedError: ", "Root Cause (first observed failure):", "[0]:", "  time      : 2026-11-24_09:04:30",
          "  rank      : 1 (local_rank: 1)", "  exitcode  : -9 (pid: 8399)", "=" * 60]


def test_torchrun_restarts_and_where_they_resumed_are_read_from_the_lines():
    lines = ["iter 3", "fault: rank 1 dies", SIGTERM, FAILED.format(-9, 8311),
             "bloomtrain: torchrun restart 1 of 2 after a rank of the previous worker group failed; resuming from "
             "global_step3", "bloomtrain: resumed at iteration 3, 24 samples consumed", "iter 4", "iter 5 died",
             FAILED.format(1, 8312), "bloomtrain: torchrun restart 2 of 2 (the last one: torchrun stops the run if "
             "this worker group fails too) after a rank of the previous worker group failed; no checkpoint yet: "
             "starting over", "iter 1", "ValueError: bad shard", SIGTERM, FAILED.format(-9, 8399), *REPORT]
    failures: list[WorkerFailure] = []
    for line in lines:
        watch_torchrun(line, failures)
    assert [(f.local_rank, f.exitcode, f.resumed_from) for f in failures] == [
        (1, -9, "global_step3"), (1, 1, "(none: started over)"), (1, -9, None)]
    assert failures[0].describe() == "local rank 1 exited with code -9 (killed by SIGKILL)"

    result = LaunchResult(["python", "-m", "torch.distributed.run", "--standalone"], 1, "exited", 9.0, lines, 2,
                          failures)
    assert result.torchrun_gave_up and result.torchrun_restarts == 2 and result.root_cause == (1, -9)
    assert result.job_exitcode == -9
    assert result.headline() == ("`python -m torch.distributed.run ...` exited with code 1 after 2 torchrun restarts; "
                                 "root cause: rank 1 exited with code -9 (killed by SIGKILL)")
    # the last group's own last lines, not the earlier groups' agent lines or torchrun's final report
    assert failure_excerpt(lines, 2) == ["iter 1", "ValueError: bad shard", "[torchrun root cause] rank      : 1 "
                                         "(local_rank: 1) | exitcode  : -9 (pid: 8399)"]
    # a launch still running (or one that succeeded) counts every failure as a restart, and has no root cause
    going = LaunchResult(result.cmd, 0, "exited", 9.0, lines[:8], 2, failures[:1])
    assert going.torchrun_restarts == 1 and going.root_cause is None and going.headline().endswith(
        "exited with code 0 after 1 torchrun restart")


def test_cancel_kills_grandchildren(tmp_path):
    pidfile = tmp_path / "pids"
    t0 = time.monotonic()
    res = run_process(
        [sys.executable, DUMMY, "--pidfile", str(pidfile), "--grandchildren", "2", "--hang"],
        on_line=lambda _: None, should_stop=pidfile.exists, stop_check_s=0.2, grace_s=5,
    )
    pids = _pids(pidfile)
    assert res.reason == "cancelled" and not res.ok
    assert len(pids) >= 5  # the job, 2 bash, 2 sleep
    assert not any(alive(p) for p in pids), [p for p in pids if alive(p)]
    assert not group_alive(pids[0])
    assert time.monotonic() - t0 < 20


def test_timeout_escalates_to_sigkill(tmp_path):
    # The job and its grandchildren ignore SIGTERM: only the SIGKILL after the grace period ends them.
    res, pids, seen = _run(tmp_path, "--grandchildren", "1", "--hang", "--ignore-term", timeout_s=2.5, grace_s=1)
    assert res.reason == "timeout" and "timed out" in res.describe()
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
                    on_line=lambda _: None, should_stop=stop, stop_check_s=0.2, grace_s=5)
    assert not any(alive(p) for p in _pids(pidfile))
    assert os.path.exists(pidfile)


def test_a_job_that_never_stops_printing_can_still_be_cancelled(tmp_path):
    flag = tmp_path / "stop"
    res = run_process(["bash", "-c", "while true; do echo spam; done"], on_line=lambda _: None,
                      should_stop=lambda: flag.exists() or flag.touch() or False, stop_check_s=0.5,
                      timeout_s=30, grace_s=2)
    assert res.reason == "cancelled" and res.seconds < 10
