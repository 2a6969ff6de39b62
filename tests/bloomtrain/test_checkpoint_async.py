"""Asynchronous checkpoints (``checkpoint.async_save``): the same files as a synchronous save, written while training
goes on, and a SIGKILL in the middle of the background write resumes exactly from the previous checkpoint.

Runs of 2 ranks (pipeline stages 0 and 1: each rank writes its own layer, engine, optimizer and RNG files) of the
tiny model on gloo; dropout is on, so a wrong RNG file would change the losses.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from bloomtrain.callbacks.base import Callback
from bloomtrain.checkpoint import safe_load
from bloomtrain.checkpoint.manifest import Verdict, verify_tag
from bloomtrain.checkpoint.tags import read_latest, tag_for
from tests.bloomtrain.train_helpers import EXACT, FORCE_BF16, TINY, train_rank
from tests.harness.gloo_harness import run_distributed, start_ranks
from tests.harness.small_disk import PAGE, mounted

pytestmark = pytest.mark.integration  # tests/tiers.py

ITERS = 4
RUN = [*EXACT, "parallel.pp=2", "model.hidden_dropout=0.1", "model.attention_dropout=0.1",
       f"schedule.train_iters={ITERS}", "checkpoint.save_interval=1", "checkpoint.keep_last=2"]
ASYNC = "checkpoint.async_save=true"
CONFIG_FILES = ("mp_rank_00_model_states.pt", "mp_rank_01_model_states.pt", "bloomtrain_model.json",
                "bloomtrain_manifest.json")
"""Files that embed the training config (which says async_save) or the digests of those: the others must be
byte-identical between an asynchronous and a synchronous run."""


def _files(tag_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(tag_dir)): p.read_bytes() for p in sorted(tag_dir.rglob("*")) if p.is_file()}


def _ok(results: list[dict]) -> list[dict]:
    for r in results:
        assert r["error"] is None, r["error"]
    return results


RUN_SPECIFIC = ("train_config", "save", "load")
"""Keys of an mp_rank file that name the run's config and checkpoint.dir (Megatron's args.save, args.load)."""


def _same_tensors(a, b, where: str) -> None:
    """``a`` and ``b`` (loaded checkpoint states) hold equal tensors (bitwise, same dtype and shape) and values,
    but for ``RUN_SPECIFIC`` keys (compared by the caller)."""
    if isinstance(a, argparse.Namespace):
        assert isinstance(b, argparse.Namespace), where
        a, b = vars(a), vars(b)
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            if key not in RUN_SPECIFIC:
                _same_tensors(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same_tensors(x, y, f"{where}[{i}]")
    else:
        assert type(a) is type(b) and a == b, where


# --- the same bytes ------------------------------------------------------------------------------------


def save_both_ways(overrides: list[str], out: str) -> dict:
    """In each rank: train, save synchronously (the run's final save), keep a copy of the tag; then save the very
    same state again through an asynchronous Checkpointer over the same engine and config."""
    from bloomtrain.checkpoint.checkpointer import Checkpointer
    from bloomtrain.config import load_config
    from bloomtrain.train import build_trainer

    cfg = load_config(TINY, overrides)
    trainer = build_trainer(cfg)
    trainer.fit()
    ckpt, tag = Path(cfg.checkpoint.dir), tag_for(trainer.pos.iteration)
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.copytree(ckpt / tag, Path(out) / tag)
    dist.barrier()
    background = Checkpointer(cfg, trainer.module, trainer.state)
    background.save_in_background()
    assert background.host is not None
    trainer.checkpointer = background
    started = time.monotonic()
    assert trainer.save_checkpoint() == tag
    in_flight, progress_at = background.in_flight, background.progress_at
    committed = background.wait()
    assert progress_at is not None and progress_at >= started and background.progress_at is None  # hang.py reads it
    return {"in_flight": in_flight, "committed": committed, "write_s": background.write_s,
            "stall_s": background.stall_s}


@pytest.mark.parametrize("precision", [["optim.precision=fp32"], FORCE_BF16], ids=["fp32", "bf16-zero"])
def test_an_asynchronous_save_writes_the_bytes_of_a_synchronous_one(tmp_path, precision):
    ckpt = tmp_path / "ckpt"
    run = [*RUN, *precision, "schedule.train_iters=2", f"checkpoint.dir={ckpt}"]
    results = run_distributed(save_both_ways, 2, run, str(tmp_path / "sync"), timeout_s=300)
    for r in results:
        assert r["in_flight"] == tag_for(2) and r["committed"] == tag_for(2)  # it went through the background
        assert r["write_s"] is not None and r["write_s"] > 0
    sync, background = _files(tmp_path / "sync" / tag_for(2)), _files(ckpt / tag_for(2))
    assert "bloomtrain_manifest.json" in sync and "rng/rank_00001.pt" in sync
    assert sync.keys() == background.keys()
    for name in sync:
        assert sync[name] == background[name], name  # every file, the manifest of digests included
    assert read_latest(ckpt) == tag_for(2)


# --- a SIGKILL during the background write -----------------------------------------------------------------

PROGRESS: dict[str, int] = {"iteration": 0}
"""The iteration the training thread finished last (set by ``Progress``, read by the kill hook's thread)."""


class Progress(Callback):
    priority = 200  # before every other hook of the iteration

    def post_train_batch(self, trainer, step) -> None:
        PROGRESS["iteration"] = step.iteration


class SlowWrite:
    """Fault hook: in the background write of ``tag``, after its first file, wait until training has finished
    iteration ``until`` (it goes on during the write, changing the weights the file holds); on ``kill_rank`` then
    note that iteration in ``marker`` and SIGKILL the process."""

    def __init__(self, tag: str, until: int, kill_rank: int | None = None, marker: Path | None = None) -> None:
        self.tag, self.until, self.kill_rank, self.marker = tag, until, kill_rank, marker

    def __call__(self, point: str, tag: str) -> None:
        if (point, tag) != ("engine_file", self.tag) or self.kill_rank not in (None, dist.get_rank()):
            return
        deadline = time.monotonic() + 120
        while PROGRESS["iteration"] < self.until and time.monotonic() < deadline:
            time.sleep(0.01)
        if self.kill_rank is not None and self.marker is not None:
            self.marker.write_text(f"{PROGRESS['iteration']}")
            os.kill(os.getpid(), signal.SIGKILL)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """The undisturbed synchronous run: per-rank results and the files of its last checkpoint."""
    ckpt = tmp_path_factory.mktemp("baseline")
    results = _ok(run_distributed(train_rank, 2, [*RUN, f"checkpoint.dir={ckpt}"], timeout_s=300))
    return results, ckpt


@pytest.mark.parametrize("rank", [0, 1])
def test_a_sigkill_during_a_background_write_resumes_exactly_from_the_previous_checkpoint(tmp_path, baseline, rank):
    expected, baseline_dir = baseline
    complete = _files(baseline_dir / tag_for(ITERS))
    ckpt, marker = tmp_path / "ckpt", tmp_path / "killed-at"
    run = [*RUN, ASYNC, f"checkpoint.dir={ckpt}"]
    outcomes = start_ranks(train_rank, 2, run, SlowWrite(tag_for(2), 3, rank, marker), lambda: [Progress()],
                           timeout_s=300).wait(60)
    assert outcomes[rank].exitcode == -signal.SIGKILL, outcomes[rank]
    assert marker.read_text() == "3"  # training went on to iteration 3 while global_step2 was being written
    assert read_latest(ckpt) == tag_for(1)  # the interrupted save never became a checkpoint
    assert _files(ckpt / tag_for(1)).keys() == complete.keys()

    # global_step3 is written while iteration 4 changes every weight: its files must hold iteration 3's
    resumed = _ok(run_distributed(train_rank, 2, run, SlowWrite(tag_for(3), 4), lambda: [Progress()], timeout_s=300))
    for got, want in zip(resumed, expected, strict=True):
        assert sorted(got["losses"]) == [2, 3, 4]
        for it in got["losses"]:
            assert got["losses"][it] == want["losses"][it], it  # bitwise: fp32 on CPU, dropout on
        assert got["position"] == want["position"]
    assert read_latest(ckpt) == tag_for(ITERS)
    for tag in (tag_for(3), tag_for(4)):
        _same_checkpoint(ckpt / tag, baseline_dir / tag)


def _same_checkpoint(tag_dir: Path, sync_dir: Path) -> None:
    """An asynchronous run's checkpoint against a synchronous run's of the same iteration: the same files; the same
    bytes but where a file names the run's config; there, the same tensors and values, and configs that differ
    only in checkpoint.async_save and checkpoint.dir."""
    mine, theirs = _files(tag_dir), _files(sync_dir)
    assert mine.keys() == theirs.keys()
    for name in mine:
        if name not in CONFIG_FILES:
            assert mine[name] == theirs[name], name  # layer, optimizer and RNG files
    for name in ("mp_rank_00_model_states.pt", "mp_rank_01_model_states.pt"):
        a, b = (safe_load.load(d / name) for d in (tag_dir, sync_dir))
        _same_tensors(a, b, name)
        assert a["train_config"]["checkpoint"].pop("async_save") is True
        assert b["train_config"]["checkpoint"].pop("async_save") is False
        for state in (a, b):
            state["train_config"]["checkpoint"].pop("dir")
        assert a["train_config"] == b["train_config"]


# --- the save at the end, and a full disk ----------------------------------------------------------------------


class DelayWrites:
    """Fault hook: every background write pauses ``seconds`` after its first file (a slow disk)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.seen: set[str] = set()

    def __call__(self, point: str, tag: str) -> None:
        if point == "engine_file" and tag not in self.seen:
            self.seen.add(tag)
            time.sleep(self.seconds)


def test_the_save_at_a_stop_request_is_committed_before_the_run_ends(tmp_path):
    switch = tmp_path / "stop"
    switch.touch()  # the kill switch is there from the start: the run saves after iteration 1 and stops
    ckpt = tmp_path / "ckpt"
    [result] = _ok(run_distributed(train_rank, 1, [*EXACT, ASYNC, f"checkpoint.dir={ckpt}",
                                                    f"checkpoint.kill_switch_path={switch}"], DelayWrites(1.0),
                                   timeout_s=300))
    assert result["position"]["iteration"] == 1
    # the rank has returned (its process gone, the background thread with it): the save it started was waited for
    assert read_latest(ckpt) == tag_for(1)
    written = {name: data for name, data in _files(ckpt / tag_for(1)).items() if name != "bloomtrain_manifest.json"}
    assert len(written) == 8  # layers, engine and optimizer, RNG, metadata: every file there and verified
    assert verify_tag(ckpt / tag_for(1)) == Verdict(digests=True, damage=None, files=len(written),
                                                    bytes=sum(map(len, written.values())))


def test_a_background_save_that_fills_the_disk_stops_the_run_at_the_next_save(tmp_path, baseline):
    expected, baseline_dir = baseline
    one_tag = sum(-(-p.stat().st_size // PAGE) * PAGE for p in (baseline_dir / tag_for(3)).rglob("*") if p.is_file())
    with mounted(tmp_path / "disk", size="16m") as small_disk:
        ckpt = small_disk.path / "ckpt"
        small_disk.fill(leave=2 * one_tag + one_tag // 2)  # two checkpoints fit, the third does not
        run = [*RUN, ASYNC, f"checkpoint.dir={ckpt}"]
        failed = run_distributed(train_rank, 2, run, timeout_s=300)
        for r in failed:  # the full disk of global_step3's background write, raised on every rank at the next save
            assert r["error"].startswith(f"DiskFull: {ckpt}: disk full on the tmpfs filesystem mounted at "
                                         f"{small_disk.path} (tmpfs): saving {tag_for(3)} needs "), r["error"]
            assert r["error"].endswith(f"run the same command again: it resumes from {tag_for(2)}"), r["error"]
        assert read_latest(ckpt) == tag_for(2)
        assert sorted(p.name for p in ckpt.iterdir()) == ["global_step1", "global_step2", "latest"]
        assert not [p for p in small_disk.path.rglob("*") if ".tmp-" in p.name]

        small_disk.free()
        resumed = _ok(run_distributed(train_rank, 2, run, timeout_s=300))
        for got, want in zip(resumed, expected, strict=True):
            assert got["losses"] == {it: want["losses"][it] for it in (3, 4)}
