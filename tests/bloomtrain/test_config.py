"""TrainConfig: the recipes' gradient accumulation at their world sizes, YAML + dotlist + flag loading, one-line
validation messages, and the generated DeepSpeed config."""

from __future__ import annotations

from pathlib import Path

import pytest

from bloomdata.errors import BloomstackError
from bloomtrain.config import load_config
from bloomtrain.model.config import ModelConfig
from bloomtrain.schedules import BatchSchedule

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "train"


# (recipe, world size, samples consumed, global batch then, gradient-accumulation steps), by hand:
# GAS = batch / (micro_batch_size x DP), DP = world / (TP x PP); during the ramp the batch is
# start + increment x floor(consumed / (ramp_samples / ((GBS - start) / increment))).
GAS_CASES = [
    # tr11: TP 4 x PP 12 over 48 nodes of 8 = 384 GPUs -> DP 8; MBS 2 -> 16 sequences per micro-step
    ("bloom-176b-tr11", 384, 0, 192, 12),  # the ramp starts at 192 = 12 x 16
    ("bloom-176b-tr11", 384, 84_187, 208, 13),  # 116 increments of 16 over 9,765,625 samples: one per 84,186.4
    ("bloom-176b-tr11", 384, 9_765_626, 2048, 128),  # after the ramp: 2048 / 16
    ("bloom-176b-tr11", 192, 10**8, 2048, 256),  # tr11's later 24 nodes: DP 4, 2048 / 8
    ("bloom-176b-tr11", 192, 0, 192, 24),
    # bloom-560m: TP 1 x PP 1 over tr11e's 8 nodes of 4 = 32 GPUs -> DP 32; MBS 1 -> 32 sequences per micro-step
    ("bloom-560m", 32, 0, 192, 6),  # the ramp starts at 192 = 6 x 32
    ("bloom-560m", 32, 4_882_812, 192, 6),  # 2 increments of 32 over 9,765,625 samples: one per 4,882,812.5
    ("bloom-560m", 32, 4_882_813, 224, 7),  # 224 / 32
    ("bloom-560m", 32, 9_765_626, 256, 8),  # after the ramp: 256 / 32
    # bloom-1b7: TP 2 x PP 2 over tr11b's 16 nodes of 4 = 64 GPUs -> DP 16; MBS 1 -> 16 per micro-step
    ("bloom-1b7", 64, 0, 192, 12),  # 192 / 16
    ("bloom-1b7", 64, 488_282, 208, 13),  # 20 increments of 16 over 9,765,625 samples: one per 488,281.25
    ("bloom-1b7", 64, 10**7, 512, 32),  # after the ramp: 512 / 16
    # tiny-cpu: no ramp, GBS 8, MBS 2
    ("tiny-cpu", 1, 0, 8, 4),
    ("tiny-cpu", 2, 0, 8, 2),
]


@pytest.mark.parametrize("name,world,consumed,batch,gas", GAS_CASES)
def test_gradient_accumulation_steps_per_recipe(name, world, consumed, batch, gas):
    cfg = load_config(CONFIGS / f"{name}.yaml")
    assert BatchSchedule.from_config(cfg.schedule)(consumed) == batch
    ds = cfg.to_deepspeed_config(world, train_batch_size=batch)
    assert (ds["train_batch_size"], ds["gradient_accumulation_steps"]) == (batch, gas)
    assert ds["train_micro_batch_size_per_gpu"] == cfg.schedule.micro_batch_size


@pytest.mark.parametrize("name,world,needle", [
    ("bloom-176b-tr11", 480, "global_batch_size=2048 is not a multiple of micro_batch_size 2 x data-parallel size 10"),
    # 64 GPUs -> DP 64: 192 = 3 x 64 fits, the increment 32 does not
    ("bloom-560m", 64,
     "rampup_batch_size increment=32 is not a multiple of micro_batch_size 1 x data-parallel size 64"),
    ("bloom-1b7", 15, "world size 15 is not divisible by tp 2 x pp 2"),
])
def test_worlds_that_do_not_fit_a_recipe(name, world, needle):
    with pytest.raises(BloomstackError, match=needle):
        load_config(CONFIGS / f"{name}.yaml").to_deepspeed_config(world)


def test_tr11_hyperparameters():
    cfg = load_config(CONFIGS / "bloom-176b-tr11.yaml")
    # BLOOM trained with Megatron-DeepSpeed's default dropout, 0.1 on both (no tr11 script overrides it)
    assert cfg.model == ModelConfig.bloom_176b(hidden_dropout=0.1, attention_dropout=0.1)
    assert (cfg.parallel.tp, cfg.parallel.pp) == (4, 12)
    assert cfg.schedule.rampup_batch_size == (192, 16, 9_765_625)
    assert (cfg.schedule.global_batch_size, cfg.schedule.micro_batch_size) == (2048, 2)
    assert (cfg.optim.lr, cfg.optim.min_lr, cfg.optim.beta2, cfg.optim.weight_decay) == (6e-5, 6e-6, 0.95, 0.1)
    assert (cfg.schedule.train_samples, cfg.schedule.warmup_samples) == (220_000_000, 183_105)
    assert cfg.checkpoint.save_interval == 100 and cfg.checkpoint.exit_duration_in_mins == 5990


def test_bf16_mode_selects_blooms_optimizer_semantics():
    cfg = load_config(CONFIGS / "tiny-cpu.yaml", ["optim.precision=bf16"])
    ds = cfg.to_deepspeed_config(1)
    # DeepSpeed 0.19.8: only stage 1 + fp32 grad_accum_dtype builds BF16_Optimizer with fp32 accumulation
    assert ds["bf16"] == {"enabled": True, "immediate_grad_update": True}
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


def test_compile_on_and_off_as_written_in_yaml_and_overrides(tmp_path):
    """YAML 1.1 reads ``on`` / ``off`` as booleans: ``model.compile`` takes them as the words the docs write."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text((CONFIGS / "tiny-cpu.yaml").read_text().replace("model:\n", "model:\n  compile: off\n", 1))
    assert load_config(recipe).model.compile == "off"
    assert load_config(recipe, ["model.compile=on"]).model.compile == "on"
    assert load_config(recipe, ["model.compile=auto"]).model.compile == "auto"
    with pytest.raises(BloomstackError, match="model.compile"):
        load_config(recipe, ["model.compile=sometimes"])


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


def test_a_bad_value_in_a_recipe_names_its_line(tmp_path):
    text = (CONFIGS / "tiny-cpu.yaml").read_text().replace("  lr: 1.0e-3", "  lr: fast")
    line = text.splitlines().index("  lr: fast") + 1
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(BloomstackError) as info:
        load_config(tmp_path / "bad.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'bad.yaml'}:{line}: optim.lr: Input should be a valid number")
    assert "(got 'fast'); fix: change optim.lr: Peak learning rate" in str(info.value)


@pytest.mark.parametrize("edit,key,needle", [
    ("  hidden_size: 100", "model.hidden_size", "hidden_size 100 is not divisible by num_heads 12"),
    ("  num_heads: 7", "model.num_heads", "hidden_size 96 is not divisible by num_heads 7"),
    ("  attention_dropout: 1.5", "model.attention_dropout", "attention_dropout must be in [0, 1), got 1.5"),
])
def test_a_model_validator_error_names_file_line_and_key(tmp_path, edit, key, needle):
    # ModelConfig's checks across fields raise ValueError, so the loader places them: file, the line of the
    # field at fault (the one the file set), the dotted key (not the line of `model:` nor a bare message)
    text = (CONFIGS / "tiny-cpu.yaml").read_text().replace("  kernels: auto", f"{edit}\n  kernels: auto")
    line = text.splitlines().index(edit) + 1
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(BloomstackError) as info:
        load_config(tmp_path / "bad.yaml")
    assert str(info.value).startswith(f"{tmp_path / 'bad.yaml'}:{line}: {key}: {needle}"), str(info.value)
    assert f"fix: change {key}" in str(info.value) and "more error" not in str(info.value)
    # the same check through an override names the override
    with pytest.raises(BloomstackError, match=r"^override model\.hidden_size=100: model\.hidden_size: hidden_size"):
        load_config(CONFIGS / "tiny-cpu.yaml", ["model.hidden_size=100"])
