"""The rehearsal's training config: BLOOM-176B's tr11 recipe with its sizes shrunk, and the list of what changed.

The run config is ``configs/train/bloom-176b-tr11.yaml`` read by the one config loader with ``key=value``
overrides, never a hand-written copy, so every value the rehearsal does not name is the recipe's: optimizer,
precision (bf16, DeepSpeed's BF16_Optimizer with ZeRO-1), dropout, init, fused kernels (``auto``), the BLOOM
index rules, the ramp-up. What it may change is closed and typed:

- the sizes in ``RehearsalScale`` (model shape, sequence length, batches and ramp-up, sample and step
  counts): a CPU box cannot hold 176B parameters or 450B tokens;
- the layout, TP 2 x PP 2 (4 processes over gloo instead of 384 GPUs), and the run's own directories;
- what the pipeline wires into every training stage (``flows.pipeline.wire_training``): the vocabulary of
  the tokenizer it trained, the blend it tuned, one validation set per language and the tokenizer for
  their bits per byte.

``override_rows`` compares the recipe with the config that actually ran, key by key, and explains each
difference from those three lists; a difference nobody declared is an error, so the rehearsal's report
cannot leave one out. The trade-off: one value per key and a reason written here by hand, instead of a
generic diff that would explain nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bloomdata.errors import BloomstackError
from bloomtrain.config import TrainConfig, load_config
from bloomtrain.precision import PrecisionChoice

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "configs" / "train" / "bloom-176b-tr11.yaml"
MIXTURE = REPO / "configs" / "data" / "bloom-tr11-mixture.yaml"
TP, PP = 2, 2  # 4 ranks: both model-parallel paths of tr11's TP 4 x PP 12, at DP 1
BLOOM_TOKENIZER_VOCAB = 250_680


class RehearsalScale(BaseModel):
    """The sizes the rehearsal shrinks; every other value of the recipe is kept. The defaults run in ~10 min on
    2 CPU cores."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_layers: int = Field(4, ge=PP, description="transformer blocks (tr11: 70); 2 per pipeline stage")
    hidden_size: int = Field(224, ge=1, description="residual width (tr11: 14336)")
    num_heads: int = Field(14, ge=TP, description="attention heads (tr11: 112); 14 = 112 / 8 is, like 112, not a "
                                                  "power of two, so ALiBi takes the same slope rule")
    seq_length: int = Field(128, ge=8, description="tokens per sample (tr11: 2048)")
    micro_batch_size: int = Field(2, ge=1, description="sequences per micro-batch (tr11: 2)")
    global_batch_size: int = Field(16, ge=1, description="sequences per step after the ramp-up (tr11: 2048)")
    rampup_batch_size: tuple[int, int, int] = Field((4, 2, 800), description="start, increment, samples of the "
                                                    "batch ramp-up (tr11: 192, 16, 9,765,625)")
    train_samples: int = Field(3_200, ge=1, description="training length in samples (tr11: 220M)")
    warmup_samples: int = Field(320, ge=0, description="linear lr warmup in samples (tr11: 183,105)")
    decay_samples: int = Field(2_909, ge=1, description="cosine decay to min_lr ends here (tr11: 200M, 10/11 of "
                                                        "the run)")
    save_interval: int = Field(100, ge=1, description="checkpoint every N iterations (tr11: 100)")
    log_interval: int = Field(1, ge=1, description="log every N iterations (tr11: 1)")
    eval_interval: int = Field(50, ge=1, description="validate every N iterations, every language (tr11: 1000)")
    eval_iters: int = Field(1, ge=1, description="global batches per validation (tr11: 1)")
    vocab_size: int = Field(4_000, ge=260, description="the rehearsal tokenizer's vocabulary (BLOOM: 250,680)")

    @model_validator(mode="after")
    def _check(self) -> RehearsalScale:
        if self.num_heads % TP or self.hidden_size % self.num_heads:
            raise ValueError(f"num_heads {self.num_heads} must divide hidden_size {self.hidden_size} and be a "
                             f"multiple of TP {TP}")
        return self


def scale_why(scale: RehearsalScale) -> dict[str, str]:
    """Why each size differs from tr11's, by the trainer key it sets (the scale's field of the same last name)."""
    start, increment, ramp = scale.rampup_batch_size
    steps = (scale.global_batch_size - start) // increment
    return {
        "model.num_layers": f"model size: a 176B model does not fit a CPU box; {scale.num_layers // PP} blocks per "
                            "pipeline stage",
        "model.hidden_size": "model size",
        "model.num_heads": f"model size; {scale.num_heads // TP} per TP rank" + (
            ", and not a power of two, as 112 is not: the ALiBi slopes take the same rule"
            if scale.num_heads & (scale.num_heads - 1) else ""),
        "model.seq_length": "model size, for a 0.7 MB demo corpus",
        "schedule.micro_batch_size": "batch",
        "schedule.global_batch_size": f"batch: {scale.global_batch_size // scale.micro_batch_size} micro-batches "
                                      "through the 2-stage pipeline per step (tr11: 128 per DP rank)",
        "schedule.rampup_batch_size": f"batch: the ramp-up stays on, {steps} increments over the first "
                                      f"{ramp / scale.train_samples:.0%} of the samples (tr11: 116 over the first "
                                      "4.4%), so that every batch size runs for a few steps",
        "schedule.train_samples": f"step count: {scale.train_samples * scale.seq_length:,} tokens (tr11: 450B)",
        "schedule.warmup_samples": f"step count: {scale.warmup_samples / scale.train_samples:.0%} of the run (tr11's "
                                   "0.08% would be under one step here)",
        "schedule.decay_samples": f"step count: the decay ends at {scale.decay_samples / scale.train_samples:.0%} of "
                                  "the run (tr11: 91%)",
        "checkpoint.save_interval": "step count",
        "logging.log_interval": "step count",
        "logging.eval_interval": "step count: a few validations of every language during the run",
        "logging.eval_iters": "step count",
    }


LOCAL_WHY = {
    "parallel.tp": f"layout: 4 processes over gloo on one CPU box, TP {TP} x PP {PP} x DP 1 (tr11: TP 4 x PP 12 x "
                   "DP 8 on 384 GPUs)",
    "parallel.pp": "layout: as parallel.tp",
    "checkpoint.dir": "local run directory (the pipeline's train stage)",
    "checkpoint.kill_switch_path": "local run directory",
    "logging.dir": "local run directory",
}
# Set by flows.pipeline.wire_training in every pipeline run (their values exist once the earlier stages ran).
WIRED_WHY = {
    "model.vocab_size": "the rehearsal's tokenizer (BLOOM's settings, a smaller vocabulary), wired by the pipeline",
    "model.pad_vocab_size_to": "250,880 rows are BLOOM's 250,680 tokens padded; the pipeline pads the tokenizer's "
                               "vocabulary by Megatron's rule instead (a multiple of 128 x TP)",
    "data.blend": "the blend the pipeline's blend stage made with the tr11 mixture (the recipe's "
                  "`bloomdata blend --mixture` command, on the rehearsal's datasets)",
    "data.valid_sets": "tr11's per-language validation sets (the recipe says to pass valid_sets.yaml), wired by "
                       "the pipeline: one per language with a validation sample",
    "data.tokenizer": "the rehearsal's tokenizer, for the bits per byte of the validation sets",
}
SECTIONS = tuple(f for f, info in TrainConfig.model_fields.items() if isinstance(info.annotation, type)
                 and issubclass(info.annotation, BaseModel))


def scale_values(scale: RehearsalScale) -> dict[str, Any]:
    """The trainer keys the scale sets, with their values."""
    fields = scale.model_dump()
    return {key: fields[key.split(".")[1]] for key in scale_why(scale)}


def local_values(run_dir: str | Path) -> dict[str, Any]:
    run = Path(run_dir).resolve()
    return {"parallel.tp": TP, "parallel.pp": PP, "checkpoint.dir": str(run / "checkpoints"),
            "checkpoint.kill_switch_path": str(run / "kill-switch"), "logging.dir": str(run / "logs")}


def recipe_config() -> TrainConfig:
    return load_config(RECIPE)


def rehearsal_train_config(scale: RehearsalScale, run_dir: str | Path) -> TrainConfig:
    """The tr11 recipe with the scale's sizes, the 4-process layout and ``run_dir`` (through the one loader)."""
    values = {**scale_values(scale), **local_values(run_dir)}
    return load_config(RECIPE, [f"{key}={json.dumps(value)}" for key, value in values.items()])


def flat(cfg: TrainConfig) -> dict[str, Any]:
    """``section.field -> value`` (JSON types); a field's value is whole (``data.valid_sets`` is one dict)."""
    tree = cfg.model_dump(mode="json")
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if key in SECTIONS:
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class OverrideRow:
    key: str
    tr11: Any
    rehearsal: Any
    why: str


def override_rows(recipe: TrainConfig, run: TrainConfig, scale: RehearsalScale) -> list[OverrideRow]:
    """Every key whose value in ``run`` differs from the recipe's, with its reason; a BloomstackError when a
    difference has no declared reason (the rehearsal changed something it must not)."""
    why = {**scale_why(scale), **LOCAL_WHY, **WIRED_WHY}
    a, b = flat(recipe), flat(run)
    changed = [k for k in a if a[k] != b[k]]
    undeclared = [k for k in changed if k not in why]
    if undeclared:
        raise BloomstackError(f"the rehearsal's training config differs from {RECIPE.name} in "
                              f"{', '.join(f'{k} ({a[k]!r} -> {b[k]!r})' for k in undeclared)}, which is not a "
                              "declared override; keep the recipe's value or declare it in flows/rehearsal_config.py")
    return [OverrideRow(k, a[k], b[k], why[k]) for k in changed]


def precision_rows(choice: PrecisionChoice | None) -> list[OverrideRow]:
    """The override the trainer itself makes: tr11's bf16 trains fp32 on a CPU without native bf16
    (``bloomtrain.precision``; its record in the run's metrics.jsonl, since train.yaml keeps the recipe's bf16)."""
    if choice is None or not choice.changed:
        return []
    return [OverrideRow("optim.precision", choice.configured, choice.ran,
                        f"hardware (the trainer's check): {choice.why}")]


def _cell(value: Any, root: Path | None) -> str:
    if isinstance(value, dict):  # data.valid_sets: the names are what matters
        return "{}" if not value else f"{len(value)} sets: " + ", ".join(value)
    text = json.dumps(value) if not isinstance(value, str) else value
    if root is not None and isinstance(value, str) and value.startswith(str(root)):
        text = "OUT" + value[len(str(root)):]
    return f"`{text}`".replace("|", "\\|")


def overrides_markdown(rows: list[OverrideRow], tokenizer_vocab: int, root: Path | None = None) -> str:
    """The artifact: every override of the recipe, and the tokenizer's one departure from BLOOM's settings."""
    lines = [f"# Overrides of `configs/train/{RECIPE.name}`", "",
             f"{len(rows)} keys of the run's training config differ from the recipe; every other value is the "
             "recipe's. Computed from the config that ran (`train/train.yaml`)"
             + (f", OUT = `{root}`" if root else "") + ".", "",
             "| key | tr11 | rehearsal | why |", "|---|---|---|---|"]
    lines += [f"| `{r.key}` | {_cell(r.tr11, root)} | {_cell(r.rehearsal, root)} | {r.why} |" for r in rows]
    lines += ["", "Tokenizer: BLOOM's (no normalizer, BLOOM's split pattern, byte-level BPE, `<unk> <s> </s> <pad>`) "
              f"with one override, `vocab_size` {BLOOM_TOKENIZER_VOCAB:,} -> {tokenizer_vocab:,} (a 0.7 MB corpus).",
              "", f"Launch: torchrun, {TP * PP} processes on one node, gloo, `OMP_NUM_THREADS=1` (2 CPU cores)."]
    return "\n".join(lines) + "\n"
