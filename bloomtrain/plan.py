"""``bloomtrain train --dry-run``: the parallel layout, parameter count, memory per GPU and training length of a
config, without starting a process group, building a model or writing a file.

The world size is ``WORLD_SIZE`` (set it to plan another; default ``tp x pp``: one data-parallel replica). Stages
are DeepSpeed's own partition of the pipeline's layer specs (``bloomtrain.parallel.pipeline.stage_bounds``). Per
tensor-parallel rank a block holds ``(12h^2 + 7h) / t + 6h`` parameters (the QKV, output and MLP weights and the
column-parallel biases split; the row-parallel biases and both LayerNorms whole), the embedding ``V h / t`` (plus its
LayerNorm on the first stage), the final LayerNorm ``2h``.

Memory per GPU, in bytes, for P parameters on it and a data-parallel size d:

- bf16 (DeepSpeed's BF16_Optimizer, ZeRO-1, fp32 gradient accumulation): weights 2P, gradients 4P (the fp32
  accumulators; the bf16 gradients are freed as they are added), optimizer 12P / d (fp32 master weights and Adam's
  two moments, partitioned over the data-parallel ranks);
- fp32 (ZeRO stage 0): weights 4P, gradients 4P, optimizer 8P.
- Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", sec. 4.1,
  tensor parallelism without sequence parallelism), per block and micro-batch of b sequences of s tokens, in 16-bit
  values: ``s b h (8 + 24 / t) + 2 a s^2 b / t``, plus ``2 s b h`` of dropout masks with hidden dropout and
  ``3 a s^2 b / t`` (mask and output) with attention dropout; doubled in fp32. The s^2 terms are the eager
  attention's scores: the fused (flash) attention keeps none, so they are an upper bound there. With
  recomputation a block keeps only its input (``2 s b h``) and one block's full activations exist at a time in
  the backward. Stage i holds ``min(pp - i, micro-batches per step)`` micro-batches in flight (1F1B); the plan
shows the stage whose GPU needs the most.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from bloomtrain.config import TrainConfig
from bloomtrain.model.config import ModelConfig
from bloomtrain.schedules import BatchSchedule, is_done


class Layout(BaseModel):
    world_size: int
    tp: int
    pp: int
    dp: int
    micro_batch_size: int
    micro_batches_per_step: int  # per data-parallel rank (gradient accumulation), at the full global batch
    global_batch_size: int
    rampup_start: int | None  # the first global batch with rampup_batch_size
    stage_blocks: list[int]  # transformer blocks per pipeline stage


class Memory(BaseModel):
    """Bytes on a GPU of the pipeline stage that needs the most."""

    stage: int
    parameters: int
    weights_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int  # without recomputation
    activations_recompute_bytes: int  # with parallel.activation_checkpointing
    total_bytes: int  # with the configured activation_checkpointing


class TrainPlan(BaseModel):
    layout: Layout
    parameters: int  # the whole model, the tied embedding counted once
    precision: str
    activation_checkpointing: bool
    memory_per_gpu: Memory
    iterations: int
    samples: int
    tokens: int
    checkpoint_dir: str | None
    checkpoint_bytes: int  # one checkpoint, all ranks: bf16/fp32 weights, fp32 master weights, Adam moments
    logging_dir: str | None


def block_params(model: ModelConfig, tp: int) -> int:
    """One transformer block's parameters on one tensor-parallel rank."""
    h = model.hidden_size
    return (12 * h * h + 7 * h) // tp + 6 * h


def stage_params(model: ModelConfig, tp: int, pp: int, bounds: list[int]) -> tuple[list[int], list[int]]:
    """(parameters, blocks) of each pipeline stage on one tensor-parallel rank, from DeepSpeed's ``bounds`` over
    ``bloomtrain.parallel.pipeline.layer_specs`` (1: embedding, 3..L+2: blocks, L+4: final LN, L+5: the head)."""
    h, layers = model.hidden_size, model.num_layers
    embedding = model.padded_vocab_size(tp) * h // tp
    params, blocks = [], []
    for stage in range(pp):
        lo, hi = bounds[stage], bounds[stage + 1]
        n = sum(1 for i in range(lo, hi) if 3 <= i < 3 + layers)
        total = n * block_params(model, tp)
        has_embedding, has_head = lo <= 1 < hi, lo <= layers + 5 < hi
        if has_embedding:
            total += embedding + 2 * h
        if has_head and not has_embedding:  # the last stage's copy of the tied embedding, without its LayerNorm
            total += embedding
        if lo <= layers + 4 < hi:
            total += 2 * h
        params.append(total)
        blocks.append(n)
    return params, blocks


def activation_bytes(model: ModelConfig, micro_batch: int, tp: int, bf16: bool) -> tuple[int, int]:
    """(one block's activations for one micro-batch, with recomputation only its input), in bytes."""
    s, h, a, b = model.seq_length, model.hidden_size, model.num_heads, micro_batch
    full = s * b * h * (8 + 24 / tp) + 2 * a * s * s * b / tp
    full += 2 * s * b * h if model.hidden_dropout > 0 else 0
    full += 3 * a * s * s * b / tp if model.attention_dropout > 0 else 0
    scale = 1 if bf16 else 2
    return round(full * scale), 2 * s * b * h * scale


def training_length(cfg: TrainConfig) -> tuple[int, int]:
    """(iterations, samples) of the whole schedule, ramp-up included."""
    batch = BatchSchedule.from_config(cfg.schedule)
    iterations = samples = 0
    while not is_done(cfg.schedule, iterations, samples):
        samples += batch(samples)
        iterations += 1
    return iterations, samples


def memory(cfg: TrainConfig, stage: int, params: int, blocks: int, dp: int, micro_batches: int) -> Memory:
    """A GPU of pipeline stage ``stage`` (module docstring)."""
    bf16 = cfg.optim.precision == "bf16"
    weights, grads = (2 if bf16 else 4) * params, 4 * params
    optimizer = 12 * params // dp if bf16 else 8 * params
    full, kept = activation_bytes(cfg.model, cfg.schedule.micro_batch_size, cfg.parallel.tp, bf16)
    in_flight = min(cfg.parallel.pp - stage, micro_batches)  # 1F1B: stage i warms up with pp - i forwards
    plain = blocks * full * in_flight
    recompute = blocks * kept * in_flight + (full if blocks else 0)
    chosen = recompute if cfg.parallel.activation_checkpointing else plain
    return Memory(stage=stage, parameters=params, weights_bytes=weights, grads_bytes=grads, optimizer_bytes=optimizer,
                  activations_bytes=plain, activations_recompute_bytes=recompute,
                  total_bytes=weights + grads + optimizer + chosen)


def plan_training(cfg: TrainConfig, world_size: int | None = None) -> TrainPlan:
    """The plan of ``cfg`` on ``world_size`` processes (default ``WORLD_SIZE``, else ``tp x pp``)."""
    from bloomtrain.parallel.pipeline import check_layout, layer_specs, stage_bounds  # noqa: PLC0415 - torch
    from bloomtrain.parallel.state import ParallelState  # noqa: PLC0415

    tp, pp = cfg.parallel.tp, cfg.parallel.pp
    world = world_size or int(os.environ.get("WORLD_SIZE", tp * pp))
    dp = cfg.dp_size(world)
    check_layout(cfg.model, tp, pp, cfg.parallel.partition_method)
    bounds = stage_bounds(layer_specs(cfg.model, ParallelState.single()), pp, cfg.parallel.partition_method)
    params, blocks = stage_params(cfg.model, tp, pp, bounds)
    mbs, gbs = cfg.schedule.micro_batch_size, cfg.schedule.global_batch_size
    layout = Layout(world_size=world, tp=tp, pp=pp, dp=dp, micro_batch_size=mbs,
                    micro_batches_per_step=gbs // (mbs * dp), global_batch_size=gbs,
                    rampup_start=cfg.schedule.rampup_batch_size[0] if cfg.schedule.rampup_batch_size else None,
                    stage_blocks=blocks)
    iterations, samples = training_length(cfg)
    total = cfg.model.num_parameters(tp)
    return TrainPlan(
        layout=layout, parameters=total, precision=cfg.optim.precision,
        activation_checkpointing=cfg.parallel.activation_checkpointing,
        memory_per_gpu=max((memory(cfg, i, params[i], blocks[i], dp, layout.micro_batches_per_step) for i in range(pp)),
                           key=lambda m: m.total_bytes),
        iterations=iterations, samples=samples, tokens=samples * cfg.model.seq_length,
        checkpoint_dir=cfg.checkpoint.dir, checkpoint_bytes=(14 if cfg.optim.precision == "bf16" else 12) * total,
        logging_dir=cfg.logging.dir)
