"""``bloomtrain train --dry-run``: the plan of a config (layout, parameters, memory per GPU, length) with no
process group and nothing written; its parameter counts are checked against the models the trainer builds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from bloomtrain.cli import main as bloomtrain_main
from bloomtrain.config import TrainConfig
from bloomtrain.model.bloom import BloomModel
from bloomtrain.model.config import ModelConfig
from bloomtrain.parallel.state import ParallelState
from bloomtrain.plan import activation_bytes, plan_training

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs/train/tiny-cpu.yaml"


def _numel(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied weight is one parameter


def _config(**sections) -> TrainConfig:
    base = {"model": {"preset": "tiny"}, "schedule": {"micro_batch_size": 2, "global_batch_size": 8,
                                                     "train_iters": 20}}
    return TrainConfig.model_validate({**base, **sections})


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    ckpt, logs = tmp_path / "ckpt", tmp_path / "logs"
    code = bloomtrain_main(["train", "--config", str(TINY), "--dry-run", "--json", f"checkpoint.dir={ckpt}",
                            f"logging.dir={logs}"])
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    assert not ckpt.exists() and not logs.exists()  # no checkpoint dir, no exit records, no metrics
    layout = plan["layout"]
    assert (layout["world_size"], layout["tp"], layout["pp"], layout["dp"]) == (1, 1, 1, 1)
    assert layout["micro_batches_per_step"] == 4 and layout["stage_blocks"] == [2]
    assert plan["parameters"] == _numel(BloomModel(ModelConfig.tiny(), device="meta"))
    assert (plan["iterations"], plan["samples"], plan["tokens"]) == (20, 160, 160 * 32)
    memory = plan["memory_per_gpu"]
    p = memory["parameters"]
    assert p == plan["parameters"]
    assert (memory["weights_bytes"], memory["grads_bytes"], memory["optimizer_bytes"]) == (2 * p, 4 * p, 12 * p)
    assert memory["activations_recompute_bytes"] < memory["activations_bytes"]
    assert memory["total_bytes"] == 18 * p + memory["activations_bytes"]  # activation_checkpointing off

    assert bloomtrain_main(["train", "--config", str(TINY), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("bloomtrain train --dry-run: the plan; nothing was written\n")
    assert f"parameters: {plan['parameters']:,}" in text and "  weights_bytes: " in text


def test_tensor_parallel_shard_holds_the_planned_parameters():
    cfg = _config(parallel={"tp": 2})
    plan = plan_training(cfg, world_size=4)  # dp 2: ZeRO-1 splits the optimizer states in two
    shard = BloomModel(cfg.model, ParallelState.offline(tp_rank=0, tp_size=2), device="meta")
    p = _numel(shard)
    assert plan.layout.dp == 2 and plan.memory_per_gpu.parameters == p
    assert plan.memory_per_gpu.optimizer_bytes == 12 * p // 2
    assert plan.parameters == _numel(BloomModel(cfg.model, device="meta"))


def test_pipeline_stages_split_the_blocks_and_recomputation_keeps_block_inputs():
    cfg = _config(model={"preset": "tiny", "num_layers": 4}, parallel={"pp": 2, "activation_checkpointing": True})
    plan = plan_training(cfg, world_size=2)
    assert plan.layout.stage_blocks == [2, 2]
    full = BloomModel(cfg.model, device="meta")
    # the first stage: the embedding with its LayerNorm and blocks 0-1 (the last: blocks 2-3, the final LayerNorm
    # and its copy of the tied embedding); it holds two micro-batches in flight, so its GPU needs the most
    first = _numel(full.embedding) + sum(_numel(b) for b in full.blocks[:2])
    stage = plan.memory_per_gpu
    assert (stage.stage, stage.parameters) == (0, first)
    assert stage.total_bytes == 18 * first + stage.activations_recompute_bytes
    s, b, h = cfg.model.seq_length, cfg.schedule.micro_batch_size, cfg.model.hidden_size
    one_block = stage.activations_bytes // (2 * 2)  # 2 blocks x 2 micro-batches in flight
    assert stage.activations_recompute_bytes == 2 * 2 * (2 * s * b * h) + one_block


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_activation_estimate_is_what_autograd_saves_for_a_block(dtype):
    """One block's forward with the fused kernels: the bytes autograd keeps for the backward (every saved tensor
    that is not a parameter, each storage once) against the plan's count of one block and micro-batch."""
    model_config = ModelConfig.tiny(kernels="fused", seq_length=64)  # s^2 terms as large as the h ones
    model = BloomModel(model_config, dtype=dtype)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.untyped_storage().data_ptr() not in params:
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    x = model.embedding(torch.randint(0, 200, (2, 64))).detach().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.blocks[0](x)
    estimate, _ = activation_bytes(model_config, micro_batch=2, tp=1, bf16=dtype == torch.bfloat16)
    assert abs(sum(saved.values()) - estimate) <= 0.01 * estimate, (sum(saved.values()), estimate)
