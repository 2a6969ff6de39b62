"""Unattended recovery under bloomtrain.launcher (torchrun with the restart hook): a rank SIGKILLed after a
checkpoint, a rank that keeps dying, and a config error.

Each run is ``bloomtrain train`` on 2 CPU ranks (gloo) under ``python -m bloomtrain.launcher --standalone``,
with one fault added by tests/bloomtrain/fault_job.py: rank 1 SIGKILLs itself right after the checkpoint of a
seeded iteration (once, a marker file remembers it), or as soon as it starts (every time).

- The killed run finishes unattended: the agent reads the attempt (rank 1 died without an exit record, rank 0
  recorded the gloo error it caused), says so in one line with the checkpoint the restart loads, and starts a
  fresh worker group, which resumes from ``latest`` and redoes the iterations after it. Its fp32 losses, per
  iteration in metrics.jsonl (the last record of an iteration wins), equal an uninterrupted run's bit for bit.
  Dropout is on, so the RNG state must be restored too. The new group's exit records say "finished".
- The rank that keeps dying stops the run after ``--max-restarts``: one line per restart, then the stop,
  exit code 1; no traceback on the console.
- A missing input stops at once (exit 2), never restarted, with the trainer's one line.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from bloomtrain.callbacks.stop_requests import launch_time
from bloomtrain.checkpoint.tags import read_latest, tag_for
from bloomtrain.exit_record import attempts, read_attempt
from tests.bloomtrain.train_helpers import EXACT, TINY, losses_by_start, train_rank
from tests.harness.gloo_harness import run_distributed

ROOT = Path(__file__).resolve().parents[2]
ITERS = 6
RUN = [*EXACT, f"schedule.train_iters={ITERS}", "checkpoint.save_interval=1", "checkpoint.keep_last=2",
       "model.hidden_dropout=0.1", "model.attention_dropout=0.1", "logging.tensorboard=false"]
KILL_AFTER = random.Random(15).randint(2, ITERS - 1)  # fixed, seeded: rank 1 dies after this checkpoint


def _dirs(run_dir: Path) -> list[str]:
    return [f"checkpoint.dir={run_dir / 'ckpt'}", f"logging.dir={run_dir / 'logs'}"]


def _launch(run_dir: Path, max_restarts: int, overrides: tuple[str, ...] = (), **fault: str):
    """``python -m bloomtrain.launcher --standalone`` on 2 ranks; (exit code, output lines)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "PYTHONUNBUFFERED": "1",
           "BLOOMTRAIN_EXIT_DIR": str(run_dir / "exits"), "BLOOMTRAIN_NODE": "node0", **fault}
    cmd = [sys.executable, "-m", "bloomtrain.launcher", "--standalone", "--nproc-per-node", "2",
           "--max-restarts", str(max_restarts), "-m", "tests.bloomtrain.fault_job", "--config", str(TINY),
           *RUN, *_dirs(run_dir), *overrides]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    return out.returncode, (out.stdout + out.stderr).splitlines()


@pytest.mark.integration
def test_a_rank_killed_after_a_checkpoint_is_restarted_and_the_run_matches_bit_for_bit(tmp_path):
    baseline = run_distributed(train_rank, 2, [*RUN, *_dirs(tmp_path / "baseline")], timeout_s=300)[0]
    assert baseline["error"] is None, baseline["error"]

    run = tmp_path / "killed"
    rc, lines = _launch(run, max_restarts=1, FAULT_RANK="1", FAULT_AFTER=str(KILL_AFTER),
                        FAULT_MARKER=str(tmp_path / "killed-once"), FAULT_PEERS_RECORD="1")
    assert rc == 0, "\n".join(lines[-30:])
    assert (tmp_path / "killed-once").exists()  # the fault did happen
    # the agent said what failed and where the new worker group resumes, in one line; no traceback
    assert (f"bloomtrain: node node0: rank 1 on node0 killed by SIGKILL; restart 1 of 1 on the same nodes, resuming "
            f"from {tag_for(KILL_AFTER)}") in lines, [x for x in lines if "bloomtrain: node" in x]
    assert f"bloomtrain: resumed at iteration {KILL_AFTER}, {8 * KILL_AFTER} samples consumed" in lines
    assert not [line for line in lines if "Traceback" in line]
    failed, restarted = (read_attempt(run / "exits", n) for n in attempts(run / "exits"))
    # killed / its peer's error, recorded before the agent's stop could end it (FAULT_PEERS_RECORD makes that order)
    assert failed.ranks[1].kind == "running" and failed.ranks[0].kind == "failure"
    assert failed.nodes["node0"].action == "retry" and "gloo" in failed.ranks[0].message
    assert [(r.kind, r.iteration, r.checkpoint, r.resumed_from) for r in restarted.ranks.values()] == \
        [("finished", ITERS, tag_for(ITERS), tag_for(KILL_AFTER))] * 2

    losses, starts = losses_by_start(run / "logs")
    assert len(starts) == 2 and starts[1] == list(range(KILL_AFTER + 1, ITERS + 1))  # the rest, redone once
    assert set(starts[0]) >= set(range(1, KILL_AFTER + 1))
    assert losses == baseline["losses"]  # bitwise: fp32 on CPU, every iteration 1..ITERS
    assert read_latest(run / "ckpt") == tag_for(ITERS)


@pytest.mark.integration
def test_a_rank_that_keeps_dying_stops_after_max_restarts_with_the_root_cause(tmp_path):
    rc, lines = _launch(tmp_path, max_restarts=2, FAULT_RANK="1", FAULT_AFTER="launch")
    assert rc == 1
    assert lines.count("fault_job: rank 1 kills itself at launch (SIGKILL)") == 3
    ours = [line for line in lines if line.startswith("bloomtrain: node node0: ")]
    cause = "bloomtrain: node node0: rank 1 on node0 killed by SIGKILL"
    # rank 1 dies before it could record anything; rank 0, stopped by the agent, may have named its checkpoint dir
    where = "(its latest checkpoint, if any|no checkpoint yet \\(starts over\\))"
    for line, expected in zip(ours, [f"{cause}; restart 1 of 2 on the same nodes, resuming from {where}",
                                     f"{cause}; restart 2 of 2 on the same nodes, resuming from {where}",
                                     f"{cause}; no torchrun restart left \\(max_restarts=2\\); the next attempt "
                                     f"resumes from {where}"]):
        assert re.fullmatch(expected, line), ours
    assert ours[3].startswith("bloomtrain: node node0: stopped; tracebacks beside the exit records in ")
    assert not [line for line in lines if "Traceback" in line or "ChildFailedError" in line]
    assert "Root Cause (first observed failure)" in (tmp_path / "exits" / "node-node0.log").read_text()  # kept


@pytest.mark.integration
def test_a_missing_input_is_never_restarted(tmp_path):
    # both ranks meet the missing file; rank 1 starts late, so rank 0's record is the one the agent reads first
    rc, lines = _launch(tmp_path, max_restarts=3, overrides=("data.kind=blend", f"data.blend={tmp_path}/no.yaml"),
                        FAULT_LATE_S="10")
    assert rc == 2
    assert lines == [f"bloomtrain: node node0: rank 0 on node0: config or input error, not retried: data.blend: blend "
                     f"file {tmp_path}/no.yaml not found; write it with `bloomdata blend` or fix the path"]
    assert attempts(tmp_path / "exits") == [0]  # one attempt: no restart


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
