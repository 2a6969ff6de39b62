"""Unattended recovery under torchrun: a rank SIGKILLed after a checkpoint, and a rank that keeps dying.

Both runs are ``bloomtrain train`` on 2 CPU ranks (gloo), launched as the flows launch it
(``flows.launch_config.build_command`` with ``max_restarts``, ``launch_env``, ``flows.launch.run_process``),
with one fault added by tests/bloomtrain/fault_job.py: rank 1 SIGKILLs itself right after the checkpoint
of a seeded iteration (once, a marker file remembers it), or as soon as it starts (every time).

- The killed run finishes unattended: torchrun starts a fresh worker group (new processes, a new
  rendezvous and process group), which resumes from ``latest`` and redoes the iterations after it. Its
  fp32 losses, per iteration in metrics.jsonl (the last record of an iteration wins), equal an
  uninterrupted run's bit for bit. Dropout is on, so the RNG state must be restored too.
- The rank that keeps dying stops the run after ``--max-restarts``: torchrun exits non-zero, the trainer
  said which restart its last group was, and the launch's description names the restarts and the
  root-cause rank and exit code.
"""

from __future__ import annotations

import json
import os
import random
import signal
from pathlib import Path

import psutil

from bloomtrain.callbacks.stop_requests import launch_time
from bloomtrain.checkpoint.tags import read_latest, tag_for
from flows.launch import run_process
from flows.launch_config import LaunchConfig, build_command, launch_env
from tests.bloomtrain.train_helpers import EXACT, TINY, train_rank
from tests.gloo_harness import run_distributed

ROOT = Path(__file__).resolve().parents[2]
ITERS = 6
RUN = [*EXACT, f"schedule.train_iters={ITERS}", "checkpoint.save_interval=1", "checkpoint.keep_last=2",
       "model.hidden_dropout=0.1", "model.attention_dropout=0.1", "logging.tensorboard=false"]
KILL_AFTER = random.Random(15).randint(2, ITERS - 1)  # fixed, seeded: rank 1 dies after this checkpoint


def _dirs(run_dir: Path) -> list[str]:
    return [f"checkpoint.dir={run_dir / 'ckpt'}", f"logging.dir={run_dir / 'logs'}"]


def _launch(run_dir: Path, max_restarts: int, **fault: str):
    launch = LaunchConfig(module="tests.bloomtrain.fault_job", module_args=[], nproc_per_node=2,
                          max_restarts=max_restarts, env={"OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", **fault})
    lines: list[str] = []
    result = run_process(build_command(launch, TINY, [*RUN, *_dirs(run_dir)]), env=launch_env(launch), cwd=ROOT,
                         on_line=lines.append, timeout_s=240, grace_s=5, tail_lines=10)
    return result, lines


def _losses(log_dir: Path) -> tuple[dict[int, float], list[list[int]]]:
    """Loss per iteration (last record wins) and the iterations each process start logged, in order."""
    losses: dict[int, float] = {}
    starts: list[list[int]] = []
    for line in (log_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("event") == "throughput_formula":  # the header every start writes first
            starts.append([])
        elif "loss" in rec:
            losses[rec["iteration"]] = rec["loss"]
            starts[-1].append(rec["iteration"])
    return losses, starts


def test_a_rank_killed_after_a_checkpoint_is_restarted_and_the_run_matches_bit_for_bit(tmp_path):
    baseline = run_distributed(train_rank, 2, [*RUN, *_dirs(tmp_path / "baseline")], timeout_s=300)[0]
    assert baseline["error"] is None, baseline["error"]

    run = tmp_path / "killed"
    result, lines = _launch(run, max_restarts=1, FAULT_RANK="1", FAULT_AFTER=str(KILL_AFTER),
                            FAULT_MARKER=str(tmp_path / "killed-once"))
    assert result.ok, result.describe()
    assert (tmp_path / "killed-once").exists()  # the fault did happen
    # torchrun saw rank 1 die by SIGKILL and started one new worker group, which resumed after the checkpoint
    [failure] = result.worker_failures
    assert (failure.local_rank, failure.exitcode, failure.resumed_from) == (1, -signal.SIGKILL, tag_for(KILL_AFTER))
    assert result.torchrun_restarts == 1
    assert (f"bloomtrain: torchrun restart 1 of 1 (the last one: torchrun stops the run if this worker group fails "
            f"too) after a rank of the previous worker group failed; resuming from {tag_for(KILL_AFTER)}") in lines
    assert f"bloomtrain: resumed at iteration {KILL_AFTER}, {8 * KILL_AFTER} samples consumed" in lines

    losses, starts = _losses(run / "logs")
    assert len(starts) == 2 and starts[1] == list(range(KILL_AFTER + 1, ITERS + 1))  # the rest, redone once
    assert set(starts[0]) >= set(range(1, KILL_AFTER + 1))
    assert losses == baseline["losses"]  # bitwise: fp32 on CPU, every iteration 1..ITERS
    assert read_latest(run / "ckpt") == tag_for(ITERS)


def test_a_rank_that_keeps_dying_stops_after_max_restarts_with_the_root_cause(tmp_path):
    result, lines = _launch(tmp_path, max_restarts=2, FAULT_RANK="1", FAULT_AFTER="launch")
    assert not result.ok and result.returncode == 1 and result.torchrun_gave_up
    assert [(f.local_rank, f.exitcode) for f in result.worker_failures] == [(1, -signal.SIGKILL)] * 3
    assert result.torchrun_restarts == 2 and result.root_cause == (1, -signal.SIGKILL)
    assert lines.count("fault_job: rank 1 kills itself at launch (SIGKILL)") == 3
    head = result.describe().splitlines()[0]
    assert head.split(". Last ")[0].endswith("exited with code 1 after 2 torchrun restarts; root cause: rank 1 "
                                             "exited with code -9 (killed by SIGKILL)"), head
    assert "[torchrun root cause] rank      : 1 (local_rank: 1) | exitcode  : -9" in result.describe()


def test_the_time_budget_runs_from_the_torchrun_agents_start(monkeypatch):
    """A restarted worker group keeps the run's budget: exit_duration_in_mins counts from the agent (the
    workers' parent) under torchrun, else from this process's start."""
    me = psutil.Process()
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    assert launch_time() == me.create_time()
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    # <=: a parent that started the same clock tick (create_time has 10 ms resolution) has the same time
    assert launch_time() == me.parent().create_time() <= me.create_time()
    assert os.getppid() == me.parent().pid
