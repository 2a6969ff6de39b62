"""A checkpoint save that fills the disk: the run stops in one line, nothing partial is published, the recovery
policy does not try again, and once space is freed the same command resumes, bit for bit.

The checkpoint folder (and the exit records) live on a real tmpfs that the test mounts (tests/harness/small_disk.py),
filled with a ballast so that two checkpoints fit and the save of iteration 3 overflows it. The run is
``bloomtrain train`` on 2 CPU ranks (pipeline stages 0 and 1: each writes its own files) under
``python -m bloomtrain.launcher``, with restarts allowed: a full disk must not be retried anyway.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bloomdata.disk import size_text
from bloomtrain.checkpoint.manifest import MANIFEST_FILE
from bloomtrain.checkpoint.tags import commit_tag, read_latest, sweep, tag_for
from bloomtrain.exit_record import NodeRecord, Recorder, attempts, read_attempt, write_record
from bloomtrain.recovery import LaunchOutcome, after_launch
from tests.bloomtrain.train_helpers import EXACT, TINY, losses_by_start, train_rank
from tests.harness.gloo_harness import run_distributed
from tests.harness.small_disk import PAGE, SmallDisk, mounted

ROOT = Path(__file__).resolve().parents[2]
ITERS = 4
FULL_AT = 3  # the save that overflows the disk
RUN = [*EXACT, f"schedule.train_iters={ITERS}", "parallel.pp=2", "checkpoint.save_interval=1", "checkpoint.keep_last=2",
       "model.hidden_dropout=0.1", "model.attention_dropout=0.1", "logging.tensorboard=false"]


def _launch(ckpt: Path, exits: Path, logs: Path) -> tuple[int, list[str]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "PYTHONUNBUFFERED": "1",
           "BLOOMTRAIN_EXIT_DIR": str(exits), "BLOOMTRAIN_NODE": "node0"}
    cmd = [sys.executable, "-m", "bloomtrain.launcher", "--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
           "-m", "bloomtrain.cli", "train", "--config", str(TINY), *RUN, f"checkpoint.dir={ckpt}",
           f"logging.dir={logs}"]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    return out.returncode, (out.stdout + out.stderr).splitlines()


def _pages(folder: Path) -> int:
    """Bytes a tmpfs gives the files under ``folder`` (whole pages)."""
    return sum(-(-p.stat().st_size // PAGE) * PAGE for p in folder.rglob("*") if p.is_file())


@pytest.mark.integration
def test_a_save_that_fills_the_disk_stops_cleanly_and_the_same_command_resumes(tmp_path):
    baseline_dir = tmp_path / "baseline"
    baseline = run_distributed(train_rank, 2, [*RUN, f"checkpoint.dir={baseline_dir}",
                                               f"logging.dir={baseline_dir / 'logs'}"], timeout_s=300)[0]
    assert baseline["error"] is None, baseline["error"]
    one_tag = _pages(baseline_dir / tag_for(FULL_AT))  # 3.3 MB: fp32 weights, Adam's moments, RNG, metadata
    tag_bytes = sum(p.stat().st_size for p in (baseline_dir / tag_for(FULL_AT)).rglob("*") if p.is_file())
    tag_bytes -= (baseline_dir / tag_for(FULL_AT) / MANIFEST_FILE).stat().st_size  # written after every other file
    with mounted(tmp_path / "disk", size="16m") as small_disk:
        _fill_then_resume(small_disk, tmp_path / "logs", one_tag, tag_bytes, baseline["losses"])


def _fill_then_resume(small_disk: SmallDisk, logs: Path, one_tag: int, tag_bytes: int,
                      expected: dict[int, float]) -> None:
    ckpt = small_disk.path / "ckpt"
    small_disk.fill(leave=(FULL_AT - 1) * one_tag + one_tag // 2)  # two checkpoints fit, the third does not
    rc, lines = _launch(ckpt, small_disk.path / "exits", logs)

    # one line, exit 2, never restarted: the disk, the bytes the save needed and the bytes free
    assert rc == 2, "\n".join(lines[-30:])
    ours = [line for line in lines if line.startswith("bloomtrain: node node0: ")]
    assert len(ours) == 1, ours
    found = re.fullmatch(
        rf"bloomtrain: node node0: rank \d on node0: disk full, not retried: {ckpt}: disk full on the tmpfs filesystem "
        rf"mounted at {small_disk.path} \(tmpfs\): saving {tag_for(FULL_AT)} needs ([\d,]+) bytes \([\d.]+ MB\), "
        rf"([\d,]+) bytes \([\d.]+ [kM]B\) free; free space there or set checkpoint.dir to another disk, then run the "
        rf"same command again: it resumes from {tag_for(FULL_AT - 1)}", ours[0])
    assert found, ours[0]
    needed, free = (int(g.replace(",", "")) for g in found.groups())
    assert abs(needed - tag_bytes) < 2048, (needed, tag_bytes)  # every byte of every rank's files, as counted
    assert 0 <= free - small_disk.available() <= 16 * PAGE < needed - free  # since then: exit records, torchrun log
    assert not [line for line in lines if "Traceback" in line]

    # nothing partial published, nothing left behind; the records say disk_full on every rank
    assert read_latest(ckpt) == tag_for(FULL_AT - 1)
    assert sorted(p.name for p in ckpt.iterdir()) == ["global_step1", "global_step2", "latest"]
    assert not [p for p in small_disk.path.rglob("*") if ".tmp-" in p.name]
    [attempt] = [read_attempt(small_disk.path / "exits", n) for n in attempts(small_disk.path / "exits")]
    assert [(r.kind, r.checkpoint) for r in attempt.ranks.values()] == [("disk_full", tag_for(FULL_AT - 1))] * 2
    assert attempt.nodes["node0"].action == "stop"

    # the Slurm job and the flows decide from the same records: stop, exit 2, though the attempt saved a checkpoint
    decision = after_launch(LaunchOutcome(exit_dir=str(small_disk.path / "exits"), returncode=rc,
                                          checkpoint_dir=str(ckpt), before=None, max_requeues=5))
    assert (decision.action, decision.exit_code) == ("stop", 2)
    assert decision.line.startswith("rank 0 on node0: disk full, not requeued: ") and size_text(needed) in decision.line

    # space freed: the same command resumes from the previous checkpoint, and the losses are an uninterrupted run's
    small_disk.free()
    rc, lines = _launch(ckpt, small_disk.path / "exits-2", logs)
    assert rc == 0, "\n".join(lines[-30:])
    assert f"bloomtrain: resumed at iteration {FULL_AT - 1}, {8 * (FULL_AT - 1)} samples consumed" in lines
    losses, starts = losses_by_start(logs)
    assert starts == [list(range(1, FULL_AT + 1)), list(range(FULL_AT, ITERS + 1))]
    assert losses == expected  # bitwise: fp32 on CPU, dropout on (the RNG state resumed too)
    assert read_latest(ckpt) == tag_for(ITERS)


@pytest.mark.integration
def test_exit_records_are_kept_on_a_disk_that_is_full(small_disk, monkeypatch):
    """The exit directory may share the full disk: a rank's ending still replaces its ``running`` record (in the
    blocks that record has), or recovery would read a death without a record and retry; a new record is skipped."""
    monkeypatch.setenv("BLOOMTRAIN_EXIT_DIR", str(small_disk.path / "exits"))
    monkeypatch.setenv("RANK", "1")
    recorder = Recorder.from_env()
    recorder.open(None, None)
    assert small_disk.fill(leave=0) == 0
    recorder.end("disk_full", "the line")
    [record] = read_attempt(small_disk.path / "exits", 0).ranks.values()
    assert (record.kind, record.message, record.rank) == ("disk_full", "the line", 1)
    assert write_record(small_disk.path / "exits", NodeRecord(node="n1", attempt=0, at=0.0, action="stop",
                                                               cause="c")) is None
    assert not [p for p in small_disk.path.rglob("*") if ".tmp-" in p.name]


def test_unfinished_saves_and_temporary_files_are_swept_at_the_next_start(tmp_path):
    """What a save killed mid-way leaves (a tag newer than ``latest``, a temporary file of ``latest``) holds space
    until the next start removes it; tags ``latest`` vouches for stay, and without ``latest`` nothing is touched."""
    for step in (1, 2, 3):
        (tmp_path / tag_for(step)).mkdir()
        (tmp_path / tag_for(step) / "layer_01-model_00-model_states.pt").write_bytes(b"x" * 100)
    assert sweep(tmp_path) == ([], 0)  # no latest: the folder may be another tool's
    commit_tag(tmp_path, tag_for(2))
    (tmp_path / "latest.tmp-123-abcdef12").write_text("global_step3")
    assert sweep(tmp_path) == ([tag_for(3)], 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == [tag_for(1), tag_for(2), "latest"]
