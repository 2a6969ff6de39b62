"""BLOOM-era tools and our checkpoints, both ways, on a TP2 bf16 checkpoint written here.

- DeepSpeed's ``DeepSpeedCheckpoint`` reads Megatron-DeepSpeed's client state from our mp_rank files
  (iteration, args, vocabulary sizes); BigScience's ds_to_universal.py reads exactly those.
- ``checkpoint.load_universal`` takes DeepSpeed's ``ds_to_universal`` output as it is (its ``latest_universal``,
  no file of ours) and does not convert again.
- A checkpoint written as Megatron-DeepSpeed wrote BLOOM's (its client state only: ``args`` with Megatron's
  enum, numpy RNG, no bloomtrain metadata) resumes training with the same loss as the uninterrupted run.
- Loading runs no code from a checkpoint: a pickle payload planted in a file DeepSpeed reads is refused in
  one line, and does not run.
"""

from __future__ import annotations

import argparse
import enum
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from bloomtrain.checkpoint.tags import LATEST_UNIVERSAL, commit_tag, read_latest
from tests.bloomtrain.train_helpers import EXACT, FORCE_BF16, train_rank
from tests.harness.gloo_harness import run_distributed

BF16 = [*EXACT, *FORCE_BF16, "checkpoint.save_interval=2", "checkpoint.keep_last=null"]
OURS = ("bloomtrain", "train_config", "world_size", "universal_checkpoint_info")


def _train(world: int, overrides: list[str]) -> dict:
    return run_distributed(train_rank, world, overrides, timeout_s=300)[0]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, dict]:
    """(checkpoint dir at global_step2, the uninterrupted run's losses through iteration 3)."""
    root = tmp_path_factory.mktemp("compat")
    r = _train(2, [*BF16, "parallel.tp=2", "schedule.train_iters=3", f"checkpoint.dir={root / 'run'}"])
    assert r["error"] is None, r["error"]
    shutil.rmtree(root / "run" / "global_step3")
    commit_tag(root / "run", "global_step2")
    return root / "run", r["losses"]


def _copy(saved_dir: Path, dest: Path) -> Path:
    shutil.copytree(saved_dir, dest)
    return dest


@pytest.mark.integration
def test_deepspeed_reads_megatron_client_state_from_our_mp_rank_files(saved):
    from deepspeed.checkpoint import DeepSpeedCheckpoint

    ckpt = DeepSpeedCheckpoint(str(saved[0] / "global_step2"))
    args = ckpt.get_args()
    assert ckpt.get_iteration() == 2 and (ckpt.tp_degree, ckpt.pp_degree, ckpt.dp_degree) == (2, 1, 1)
    assert isinstance(args, argparse.Namespace)
    assert (args.tensor_model_parallel_size, args.num_layers, args.hidden_size,
            args.num_attention_heads) == (2, 2, 96, 12)
    assert (args.consumed_train_samples, args.consumed_train_tokens) == (16, 16 * 32)
    # what BigScience's ds_to_universal.py reads (checkpoint_info[ORIGINAL_VOCAB_SIZE]) to find the padding rows
    assert ckpt.get_checkpoint_info() == {"padded_vocab_size": 256, "original_vocab_size": 250}
    sd = torch.load(ckpt.mp_rank_files[1], weights_only=False)
    assert (sd["checkpoint_version"], sd["iteration"], sd["tokens"]) == (3.0, 2, 512)
    assert {"random_rng_state", "np_rng_state", "torch_rng_state"} <= set(sd)


@pytest.mark.integration
def test_load_universal_takes_deepspeeds_ds_to_universal_output_as_it_is(saved, tmp_path):
    run = _copy(saved[0], tmp_path / "run")
    converted = run / "converted"  # any name: latest_universal says which
    subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                    str(run / "global_step2"), "--output_folder", str(converted), "--num_extract_workers", "1",
                    "--num_merge_workers", "1"], check=True, capture_output=True)
    assert read_latest(run, LATEST_UNIVERSAL) == "converted"
    before = {p: p.stat().st_mtime_ns for p in converted.rglob("*")}

    r = _train(2, [*BF16, "parallel.tp=1", "schedule.train_iters=3", f"checkpoint.dir={run}",
                   "checkpoint.load_universal=true"])
    assert r["error"] is None, r["error"]
    assert sorted(r["losses"]) == [3]
    assert r["losses"][3] == pytest.approx(saved[1][3], rel=2e-4)  # another layout reduces in another order
    assert {p: p.stat().st_mtime_ns for p in converted.rglob("*")} == before  # used as it is
    assert not (run / "global_step2_universal").exists()


class PositionEmbeddingType(enum.Enum):  # Megatron-DeepSpeed's megatron/enums.py
    rotary = 1
    absolute = 2
    alibi = 3


def _as_megatron_wrote_it(tag_dir: Path, monkeypatch) -> None:
    """Rewrite a tag as Megatron-DeepSpeed wrote BLOOM's: DeepSpeed's files, its client state, nothing of ours."""
    fake = types.ModuleType("megatron.enums")
    fake.PositionEmbeddingType = PositionEmbeddingType
    PositionEmbeddingType.__module__ = "megatron.enums"
    monkeypatch.setitem(sys.modules, "megatron.enums", fake)  # so the enum pickles under Megatron's name
    for path in [*tag_dir.glob("bloomtrain_*.json"), tag_dir / "rng"]:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    for path in tag_dir.glob("mp_rank_*_model_states.pt"):
        sd = torch.load(path, weights_only=False)
        for key in OURS:
            del sd[key]
        sd["args"].position_embedding_type = PositionEmbeddingType.alibi
        name, key, *rest = sd["np_rng_state"]
        sd["np_rng_state"] = (name, key.numpy().astype(np.uint32), *rest)  # np.random.get_state() itself
        sd["cuda_rng_state"] = torch.get_rng_state()
        sd["rng_tracker_states"] = {"model-parallel-rng": torch.get_rng_state()}
        torch.save(sd, path)


@pytest.mark.integration
def test_a_checkpoint_written_as_megatron_deepspeed_wrote_bloom_resumes_training(saved, tmp_path, monkeypatch):
    run = _copy(saved[0], tmp_path / "run")
    _as_megatron_wrote_it(run / "global_step2", monkeypatch)
    assert b"megatron.enums" in (run / "global_step2" / "mp_rank_00_model_states.pt").read_bytes()

    r = _train(2, [*BF16, "parallel.tp=2", "schedule.train_iters=3", f"checkpoint.dir={run}"])
    assert r["error"] is None, r["error"]
    assert r["losses"] == {3: saved[1][3]}  # exactly the uninterrupted run's
    assert r["position"]["consumed_samples"] == 24

    wrong = _train(2, [*BF16, "parallel.tp=2", "model.num_layers=3", "schedule.train_iters=4",
                       f"checkpoint.dir={run}"])
    assert "model.num_layers=3 (checkpoint: 2)" in wrong["error"]


@pytest.mark.integration
def test_a_planted_pickle_payload_is_refused_in_one_line_and_does_not_run(saved, tmp_path):
    """The payload sits in a universal checkpoint's fp32 file: DeepSpeed itself reads those files, with
    torch.load(weights_only=False), so this checks that the whole engine load is forced to weights_only."""
    run = _copy(saved[0], tmp_path / "run")
    marker = tmp_path / "payload_ran"
    subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                    str(run / "global_step2"), "--output_folder", str(run / "global_step2_universal"),
                    "--num_extract_workers", "1", "--num_merge_workers", "1"], check=True, capture_output=True)
    planted = run / "global_step2_universal" / "zero" / "3.mlp.dense_h_to_4h.weight" / "fp32.pt"
    state = torch.load(planted, weights_only=False)
    torch.save({**state, "extra": Payload(marker)}, planted)

    r = _train(2, [*BF16, "parallel.tp=1", "schedule.train_iters=3", f"checkpoint.dir={run}",
                   "checkpoint.load_universal=true"])
    error = r["error"].removeprefix("BloomstackError: ")
    assert error.startswith(f"{planted}: refused to load: its pickle calls posix.system"), error
    assert "\n" not in error
    assert not marker.exists()


class Payload:
    """Pickles as a call of os.system that would create ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


# --- file-level reads (no training) ---------------------------------------------------------------------


def test_rng_files_hold_tensors_and_plain_values_and_old_ones_still_load(tmp_path):
    import random

    from bloomtrain.checkpoint.rng import load_rng, rng_path, save_rng, seed_everything

    def draws() -> tuple:
        return random.random(), float(np.random.randn()), torch.rand(3).tolist()

    seed_everything(7)
    save_rng(tmp_path, "new", 0)
    expected = draws()
    torch.load(rng_path(tmp_path, "new", 0), weights_only=True)  # no allowlist needed: tensors and plain values
    seed_everything(8)
    assert load_rng(tmp_path, "new", 0) and draws() == expected

    # bloomtrain's earlier format: a plain pickle of numpy's state tuple (an ndarray inside)
    seed_everything(9)
    old = rng_path(tmp_path, "old", 0)
    old.parent.mkdir(parents=True)
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}, old)
    expected = draws()
    seed_everything(10)
    assert load_rng(tmp_path, "old", 0) and draws() == expected


@pytest.mark.integration
def test_every_reader_refuses_a_payload_in_one_line(tmp_path):
    from bloomdata.errors import BloomstackError
    from bloomtrain.checkpoint import safe_load
    from bloomtrain.checkpoint.engine_files import DurableCheckpointEngine
    from bloomtrain.checkpoint.rng import load_rng, rng_path

    marker = tmp_path / "payload_ran"
    planted = rng_path(tmp_path, "global_step1", 0)
    planted.parent.mkdir(parents=True)
    torch.save({"random_rng_state": Payload(marker)}, planted)
    for read in (lambda: DurableCheckpointEngine(True).load(str(planted)),  # DeepSpeed's reads of its files
                 lambda: load_rng(tmp_path, "global_step1", 0)):
        with pytest.raises(BloomstackError) as err:
            read()
        assert str(err.value).startswith(f"{planted}: refused to load: its pickle calls posix.system")
        assert "\n" not in str(err.value)
    # DeepSpeed's own torch.load(..., weights_only=False) calls, inside the engine's load
    with pytest.raises(BloomstackError, match="refused to load: its pickle calls posix.system"):
        safe_load.guarded(tmp_path, lambda: torch.load(planted, weights_only=False))
    assert not marker.exists()
    assert safe_load.FORCE_ENV not in os.environ  # the forcing ends with the load
