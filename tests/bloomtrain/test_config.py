"""TrainConfig: YAML + dotlist loading, validation messages, and the generated DeepSpeed config."""

from __future__ import annotations

from pathlib import Path

import pytest

from bloomdata.errors import BloomstackError
from bloomtrain.config import load_config
from bloomtrain.model.config import ModelConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "train"


@pytest.mark.parametrize("name,world", [("tiny-cpu", 1), ("bloom-560m", 8), ("bloom-1b7", 16),
                                        ("bloom-176b-tr11", 384)])
def test_repo_configs_load_and_generate_deepspeed(name, world):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    ds = cfg.to_deepspeed_config(world)
    dp = world // (cfg.parallel.tp * cfg.parallel.pp)
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * dp


def test_tr11_hyperparameters():
    cfg = load_config(CONFIGS / "bloom-176b-tr11.yaml")
    assert cfg.model == ModelConfig.bloom_176b()
    assert (cfg.parallel.tp, cfg.parallel.pp) == (4, 12)
    assert cfg.schedule.rampup_batch_size == (192, 16, 9_765_625)
    assert (cfg.schedule.global_batch_size, cfg.schedule.micro_batch_size) == (2048, 2)
    assert (cfg.optim.lr, cfg.optim.min_lr, cfg.optim.beta2, cfg.optim.weight_decay) == (6e-5, 6e-6, 0.95, 0.1)
    assert (cfg.schedule.train_samples, cfg.schedule.warmup_samples) == (220_000_000, 183_105)
    assert cfg.checkpoint.save_interval == 100 and cfg.checkpoint.exit_duration_in_mins == 5990
    # at the start of the ramp: GBS 192 over DP 8 with MBS 2 = 12 micro-batches
    ds = cfg.to_deepspeed_config(384, train_batch_size=192)
    assert ds["gradient_accumulation_steps"] == 12


def test_bf16_mode_selects_blooms_optimizer_semantics():
    cfg = load_config(CONFIGS / "tiny-cpu.yaml", ["optim.precision=bf16"])
    ds = cfg.to_deepspeed_config(1)
    # DeepSpeed 0.19.8: only stage 1 + fp32 grad_accum_dtype builds BF16_Optimizer with fp32 accumulation
    assert ds["bf16"] == {"enabled": True}
    assert ds["zero_optimization"]["stage"] == 1
    assert ds["data_types"] == {"grad_accum_dtype": "fp32"}
    assert ds["gradient_clipping"] == cfg.optim.clip_grad
    fp32 = load_config(CONFIGS / "tiny-cpu.yaml", ["optim.precision=fp32"]).to_deepspeed_config(1)
    assert "bf16" not in fp32 and fp32["zero_optimization"]["stage"] == 0
    assert fp32["gradient_clipping"] == 0.0  # our ClippedAdamW clips on the correct global norm


def test_overrides_are_typed_and_nested():
    cfg = load_config(CONFIGS / "tiny-cpu.yaml", ["optim.lr=3e-4", "model.num_layers=4", "parallel.pp=2",
                                                  "schedule.rampup_batch_size=[4, 2, 100]",
                                                  "schedule.train_iters=null", "schedule.train_samples=1000"])
    assert cfg.optim.lr == 3e-4 and cfg.model.num_layers == 4 and cfg.model.hidden_size == 96
    assert cfg.parallel.pp == 2 and cfg.schedule.rampup_batch_size == (4, 2, 100)


@pytest.mark.parametrize("overrides,needle", [
    (["optim.lrr=1"], "optim.lrr"),
    (["schedule.train_samples=10"], "exactly one of train_samples and train_iters"),
    (["model.preset=bloom-9b"], "unknown model preset"),
    (["schedule.global_batch_size=7"], "not a multiple of micro_batch_size"),
    (["oops"], "not key=value"),
])
def test_bad_configs_name_the_key(overrides, needle):
    with pytest.raises(BloomstackError, match=needle):
        load_config(CONFIGS / "tiny-cpu.yaml", overrides)


def test_world_size_mismatch_says_what_to_change():
    cfg = load_config(CONFIGS / "tiny-cpu.yaml", ["parallel.tp=2"])
    with pytest.raises(BloomstackError, match="not divisible by tp 2"):
        cfg.dp_size(3)
    cfg = load_config(CONFIGS / "tiny-cpu.yaml", ["schedule.global_batch_size=6"])
    with pytest.raises(BloomstackError, match="data-parallel size 2"):
        cfg.dp_size(2)
