"""Hangs and stragglers under bloomtrain.launcher: a frozen rank, a rank stuck in Python, a slow rank.

Each run is ``bloomtrain train`` on 2 CPU ranks with TP 2 (gloo) under ``python -m bloomtrain.launcher
--standalone --max-restarts 1``, with one fault from tests/bloomtrain/fault_job.py, and a hang watchdog sized for
a test: ``stability.hang_timeout_s=auto`` with a floor of a few seconds (5 x the longest iteration measured
otherwise).

- Rank 1 freezes (SIGSTOP) right after the checkpoint of iteration 3: rank 0, blocked in the next step's
  collective, sees no finished iteration within its allowance, writes every thread's stack and a ``hang`` record
  and exits; the agent finds rank 1's process stopped, names it in one line with the checkpoint the restart loads,
  kills it at once and restarts the group; the run finishes with the losses of an undisturbed run, bit for bit.
- Rank 1 sleeps in Python after the same checkpoint: its own watchdog records the hang with its stack (the sleep
  in it) and its last finished iteration, 2, behind rank 0's 3: the line names rank 1; same restart, same losses.
- Rank 1 computes 0.5 CPU seconds more in every step (about 10x a step of this model): the watchdog never trips
  (its allowance follows the measured iterations), and rank 1 is named once as a straggler, when the window of
  5 log intervals is complete; the undisturbed run, on the same crowded machine, names nobody.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bloomtrain.callbacks.hang import Allowance, HangCallback, margin_s, stacks_text
from bloomtrain.checkpoint.tags import read_latest, tag_for
from bloomtrain.config import StabilityConfig
from bloomtrain.exit_record import Recorder, attempts, read_attempt
from tests.bloomtrain.train_helpers import EXACT, TINY, losses_by_start, train_rank
from tests.harness.gloo_harness import run_distributed

ROOT = Path(__file__).resolve().parents[2]
ITERS = 6
AFTER = 3  # the fault comes right after this iteration's checkpoint
RUN = [*EXACT, f"schedule.train_iters={ITERS}", "checkpoint.save_interval=1", "checkpoint.keep_last=2",
       "model.hidden_dropout=0.1", "model.attention_dropout=0.1", "logging.tensorboard=false", "parallel.tp=2",
       "stability.hang_floor_s=3"]
LINE = "bloomtrain: node node0: "


def _dirs(run_dir: Path) -> list[str]:
    return [f"checkpoint.dir={run_dir / 'ckpt'}", f"logging.dir={run_dir / 'logs'}"]


def _launch(run_dir: Path, **fault: str) -> tuple[int, list[str]]:
    """``python -m bloomtrain.launcher --standalone`` on 2 ranks, one restart; (exit code, output lines)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "PYTHONUNBUFFERED": "1",
           "BLOOMTRAIN_EXIT_DIR": str(run_dir / "exits"), "BLOOMTRAIN_NODE": "node0", **fault}
    cmd = [sys.executable, "-m", "bloomtrain.launcher", "--standalone", "--nproc-per-node", "2", "--max-restarts",
           "1", "-m", "tests.bloomtrain.fault_job", "--config", str(TINY), *RUN, *_dirs(run_dir)]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    return out.returncode, (out.stdout + out.stderr).splitlines()


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "logs" / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> tuple[dict[int, float], list[dict]]:
    """The undisturbed run's losses and metrics records."""
    run = tmp_path_factory.mktemp("baseline")
    result = run_distributed(train_rank, 2, [*RUN, *_dirs(run)], timeout_s=300)[0]
    assert result["error"] is None, result["error"]
    return result["losses"], _records(run)


def _restarted_and_matches(run: Path, lines: list[str], baseline_losses: dict[int, float]) -> None:
    assert f"bloomtrain: resumed at iteration {AFTER}, {8 * AFTER} samples consumed" in lines
    assert not [line for line in lines if "Traceback" in line]
    restarted = read_attempt(run / "exits", attempts(run / "exits")[-1])
    assert [(r.kind, r.iteration, r.resumed_from) for r in restarted.ranks.values()] == \
        [("finished", ITERS, tag_for(AFTER))] * 2
    losses, starts = losses_by_start(run / "logs")
    assert len(starts) == 2 and starts[1] == list(range(AFTER + 1, ITERS + 1))
    assert losses == baseline_losses  # bitwise: fp32 on CPU, every iteration 1..ITERS
    assert read_latest(run / "ckpt") == tag_for(ITERS)


def _waited_within_allowance(message: str) -> None:
    waited, allowed = re.search(r"for ([\d.]+) s .*auto: ([\d.]+) s\)", message).groups()  # type: ignore[union-attr]
    assert float(allowed) <= float(waited) < float(allowed) + 2.0, message


@pytest.mark.integration
def test_a_frozen_rank_is_named_and_the_run_restarts_from_its_checkpoint(baseline, tmp_path):
    run = tmp_path / "frozen"
    rc, lines = _launch(run, FAULT_RANK="1", FAULT_AFTER=str(AFTER), FAULT_HOW="stop",
                        FAULT_MARKER=str(tmp_path / "frozen-once"))
    assert rc == 0, "\n".join(lines[-30:])
    ours = [line for line in lines if line.startswith(LINE)]
    assert len(ours) == 1, ours
    assert re.fullmatch(
        rf"{LINE}rank 1 on node0 stopped making progress \(its process is stopped \(SIGSTOP, a debugger\), no exit "
        rf"record\); rank 0 on node0: no finished iteration for [\d.]+ s after iteration {AFTER} \(stability\."
        rf"hang_timeout_s=auto: [\d.]+ s\); stacks in {run / 'exits'}/attempt-0; restart 1 of 1 on the same nodes, "
        rf"resuming from {tag_for(AFTER)}", ours[0]), ours[0]
    hung = read_attempt(run / "exits", 0)
    assert (hung.ranks[0].kind, hung.ranks[0].iteration, hung.ranks[1].kind) == ("hang", AFTER, "running")
    _waited_within_allowance(hung.ranks[0].message)
    stacks = Path(hung.ranks[0].traceback or "").read_text()
    assert stacks.startswith(f"bloomtrain: rank 0 on node0 (pid {hung.ranks[0].pid}): no finished iteration")
    main = stacks.split("Thread MainThread", 1)[1].split("\nThread ", 1)[0]
    assert "in train_step" in main and "bloomtrain/trainer.py" in main  # blocked in the next step
    assert "Thread bloomtrain-hang-watchdog" in stacks
    _restarted_and_matches(run, lines, baseline[0])


@pytest.mark.integration
def test_a_rank_stuck_in_python_records_its_own_hang_and_is_named(baseline, tmp_path):
    run = tmp_path / "asleep"
    rc, lines = _launch(run, FAULT_RANK="1", FAULT_AFTER=str(AFTER), FAULT_HOW="sleep",
                        FAULT_MARKER=str(tmp_path / "asleep-once"))
    assert rc == 0, "\n".join(lines[-30:])
    ours = [line for line in lines if line.startswith(LINE)]
    assert len(ours) == 1, ours
    assert re.fullmatch(
        rf"{LINE}rank 1 on node0 stopped making progress \(behind: its last finished iteration is {AFTER - 1}, its "
        rf"peers' {AFTER}\); rank 1 on node0: no finished iteration for [\d.]+ s after iteration {AFTER - 1} "
        rf"\(stability\.hang_timeout_s=auto: [\d.]+ s\); stacks in {run / 'exits'}/attempt-0; restart 1 of 1 on the "
        rf"same nodes, resuming from {tag_for(AFTER)}", ours[0]), ours[0]
    hung = read_attempt(run / "exits", 0)
    assert (hung.ranks[1].kind, hung.ranks[1].iteration) == ("hang", AFTER - 1)
    _waited_within_allowance(hung.ranks[1].message)
    main = Path(hung.ranks[1].traceback or "").read_text().split("Thread MainThread", 1)[1].split("\nThread ", 1)[0]
    assert "fault_job.py" in main and "time.sleep(3600)" in main
    _restarted_and_matches(run, lines, baseline[0])


@pytest.mark.integration
def test_a_slow_rank_does_not_trip_the_watchdog_and_is_named_a_straggler(baseline, tmp_path):
    run = tmp_path / "slow"
    rc, lines = _launch(run, FAULT_SLOW_RANK="1", FAULT_SLOW_CPU_S="0.5")
    assert rc == 0, "\n".join(lines[-30:])
    assert attempts(run / "exits") == [0]
    assert [r.kind for r in read_attempt(run / "exits", 0).ranks.values()] == ["finished"] * 2
    named = [line for line in lines if "straggler" in line]
    assert len(named) == 1 and re.fullmatch(
        r"bloomtrain: straggler: rank 1 on node0 is [\d.]+x slower than the median of its peers: its fastest step of "
        rf"the last 5 log intervals \(to iteration {ITERS}\) took [\d.]+ s of CPU, theirs [\d.]+ s; if it stays slow, "
        r"exclude node0 \(bloomtrain slurm --exclude node0\) and resume", named[0]), named
    records = _records(run)
    assert [r["rank"] for r in records if r.get("event") == "straggler"] == [1]
    timed = [r for r in records if "slowest_rank" in r]
    assert [r["iteration"] for r in timed] == list(range(2, ITERS + 1))  # the first iteration is warm-up
    assert all(r["slowest_rank"] == 1 and r["slowest_rank_busy_s"] >= 0.5 for r in timed)
    # the undisturbed run, timed alike (a window of 5 complete at iteration 6): nobody named
    healthy = baseline[1]
    assert [r["iteration"] for r in healthy if "slowest_rank" in r] == list(range(2, ITERS + 1))
    assert not [r for r in healthy if r.get("event") == "straggler"]


def test_the_allowance_follows_the_longest_iteration_with_a_floor():
    auto = Allowance("auto", floor_s=600.0, startup_s=300.0)
    assert auto.seconds == 1500.0  # the first iteration of a launch: 5 x the start-up (engine, checkpoint load)
    auto.measured(200.0)  # the first iteration: warm-up, compilation
    assert auto.seconds == 1000.0
    auto.measured(10.0)
    assert auto.seconds == 600.0  # the floor
    auto.measured(150.0)  # a checkpoint save
    auto.measured(10.0)
    assert auto.seconds == 750.0 and auto.describe() == "stability.hang_timeout_s=auto: 750.0 s"
    fixed = Allowance(30.0, floor_s=600.0, startup_s=20.0)
    assert fixed.seconds == 100.0  # the first iteration still gets 5 x the start-up
    fixed.measured(1.0)
    assert fixed.seconds == 30.0 and fixed.describe() == "stability.hang_timeout_s=30"
    assert margin_s(10.0) == 5.0 and margin_s(600.0) == 60.0


class BackgroundWrite:
    """The checkpointer as the watchdog reads it: ``progress_at`` is when the background write last wrote a file."""

    progress_at: float | None = None


def test_a_background_write_that_progresses_holds_the_watchdog_off():
    hang = HangCallback(StabilityConfig(hang_timeout_s=10.0), Recorder(None, 0, 0, "node0"))
    hang.last, hang.limit = 100.0, 10.0  # the last iteration finished at t = 100 s; 10 s allowed
    assert not hang.overdue(109.0) and hang.overdue(110.5)
    hang.saves = BackgroundWrite()
    assert hang.overdue(110.5)  # no background save: only iterations count
    hang.saves.progress_at = 105.0  # the training thread waits for a write that wrote a file at t = 105 s
    assert not hang.overdue(110.5) and hang.overdue(115.5)  # a write that stopped progressing: a hang too
    hang.saves.progress_at = 90.0  # older than the last iteration: the iteration counts
    assert hang.overdue(110.5)


def test_the_stack_file_holds_every_thread_main_first():
    import threading

    started, release = threading.Event(), threading.Event()

    def parked() -> None:
        started.set()
        release.wait()

    thread = threading.Thread(target=parked, name="parked-thread")
    thread.start()
    started.wait()
    try:
        text = stacks_text("header line")
    finally:
        release.set()
        thread.join()
    assert text.startswith("header line\n\nThread MainThread (")
    assert "Thread parked-thread (" in text and "in parked\n    release.wait()" in text
    assert "in test_the_stack_file_holds_every_thread_main_first" in text.split("Thread parked-thread")[0]
