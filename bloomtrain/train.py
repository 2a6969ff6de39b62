"""The composition root of ``bloomtrain train --config configs/train/NAME.yaml [key=value ...]`` (bloomtrain.cli.train).

Launch under torchrun or the DeepSpeed launcher (one process per device); without a launcher it runs as a
single process. Every object is built here from the typed config and passed explicitly::

    ParallelState -> PipelineModule (specs, tied head, loss) -> DeepSpeed engine (generated config)
                  -> TrainModule -> data (samples + Megatron sampler) -> Checkpointer -> callbacks -> Trainer

``run(cfg)`` is the same path for tests that already joined a process group.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from bloomdata.megatron.builder import FixedSamples
from bloomtrain.callbacks import (
    Callback,
    CheckpointCallback,
    MetricsCallback,
    NanDrillCallback,
    StabilityCallback,
    StopRequestsCallback,
    ValidSetCallback,
)
from bloomtrain.callbacks.base import TrainResult
from bloomtrain.callbacks.compile_time import CompileTimeCallback
from bloomtrain.callbacks.configured import configured_callbacks
from bloomtrain.callbacks.profile import profile_callbacks
from bloomtrain.callbacks.stragglers import StragglerCallback
from bloomtrain.callbacks.tracking import require_wandb, wandb_callbacks
from bloomtrain.checkpoint.checkpointer import Checkpointer, FaultHook, start_check
from bloomtrain.checkpoint.rng import seed_everything
from bloomtrain.checkpoint.universal import needs_universal
from bloomtrain.config import TrainConfig
from bloomtrain.console import setup_console
from bloomtrain.data import FirstSamples, Samples, build_datasets, build_valid_sets, token_byte_lengths
from bloomtrain.engine import build_engine
from bloomtrain.exit_record import node_name
from bloomtrain.model.compiled import compile_blocks
from bloomtrain.parallel.pipeline import LossFn, build_pipeline
from bloomtrain.parallel.state import ParallelState
from bloomtrain.precision import CpuInfo, PrecisionChoice, fit_precision
from bloomtrain.schedules import BatchSchedule
from bloomtrain.train_module import TrainModule
from bloomtrain.trainer import Trainer


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed() -> None:
    """Join the launcher's process group (env://), or make a one-process group when run directly.

    Also attaches DeepSpeed's comm layer when torch.distributed is already up (tests, notebooks).
    """
    if not dist.is_initialized() and "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    os.environ.setdefault("LOCAL_RANK", os.environ.get("RANK", "0"))
    if torch.cuda.is_available() and not {"TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"} & set(os.environ):
        # NCCL's flight recorder keeps the last collectives for the hang watchdog's dump (bloomtrain.callbacks.hang)
        os.environ["TORCH_FR_BUFFER_SIZE"] = "2000"
    import deepspeed  # noqa: PLC0415
    from deepspeed.accelerator import get_accelerator  # noqa: PLC0415

    from bloomtrain.engine import skip_cpu_shm_comm_build  # noqa: PLC0415

    skip_cpu_shm_comm_build()
    deepspeed.init_distributed(dist_backend=get_accelerator().communication_backend_name())


@dataclass(frozen=True)
class Validation:
    """What a run evaluates on: the overall validation samples (None: none) and the named validation sets."""

    data: Samples | None = None
    sets: Sequence[FixedSamples] = ()


def default_callbacks(cfg: TrainConfig, validation: Validation, rank: int, world: int, *,
                      precision: PrecisionChoice | None = None, user: Sequence[Callback] = ()) -> list[Callback]:
    """The run's behaviour besides the step, with the ``user`` callbacks (the config's). The trainer runs them by
    ``priority`` (bloomtrain.callbacks.base), whatever their order here: log the iteration, evaluate (the overall
    validation set, then each named one), enforce the skip limit (save, raise), agree on stop requests, the user's,
    save on the interval; the final save (end of the schedule, or a stop) is the checkpoint callback's
    ``post_train``. Saving comes after every other hook of the iteration, so each callback's saved state is the
    state after the iteration it names."""
    valid_data, valid_sets = validation.data, validation.sets
    byte_lengths = np.zeros(0, dtype=np.int64)
    if valid_sets:
        from bloomdata.tokenizer.bpe import load_tokenizer  # noqa: PLC0415

        assert cfg.data.tokenizer is not None  # DataConfig: valid_sets need data.tokenizer
        byte_lengths = token_byte_lengths(load_tokenizer(cfg.data.tokenizer))
    interval, mbs = cfg.logging.eval_interval, cfg.schedule.micro_batch_size
    # the overall set: the same first eval_iters global batches at every evaluation (Megatron's), then the named
    overall = [] if valid_data is None else [
        FirstSamples(valid_data, cfg.logging.eval_iters * cfg.schedule.global_batch_size)]
    return [
        NanDrillCallback(cfg.stability.inject_nan_at_iters),
        MetricsCallback(cfg, rank, world, precision),
        *wandb_callbacks(cfg, rank),
        *(ValidSetCallback("valid", s, interval=interval, micro_batch_size=mbs, overall=True) for s in overall),
        *(ValidSetCallback(s.name, s, interval=interval, micro_batch_size=mbs, byte_lengths=byte_lengths)
          for s in valid_sets),
        StabilityCallback(cfg.stability),
        StopRequestsCallback(cfg.checkpoint),
        StragglerCallback(cfg.stability.straggler_factor, cfg.stability.straggler_window, cfg.logging.log_interval,
                          node_name()),
        *profile_callbacks(cfg.logging.profile_iters, cfg.logging.profile_ranks, cfg.logging.dir, rank),
        *user,
        CheckpointCallback(cfg.checkpoint.save_interval, cfg.checkpoint.mtbf_hours),
    ]


def build_trainer(cfg: TrainConfig, *, callbacks: Sequence[Callback] = (), faults: FaultHook | None = None,
                  cpu: CpuInfo | None = None) -> Trainer:
    """The trainer of ``cfg``: ``default_callbacks`` (the config's ``callbacks``, a user's imported by name, among
    them) and ``callbacks``, run by priority; ``faults`` is the Checkpointer's fault-injection hook (tests only);
    ``cpu`` describes the CPU (default: this one's)."""
    user = configured_callbacks(cfg.callbacks)  # an import error fails before any process group work
    require_wandb(cfg)  # so does a missing wandb package
    init_distributed()
    setup_console()
    from deepspeed.accelerator import get_accelerator  # noqa: PLC0415

    device = get_accelerator().device_name()
    # The precision that fits this hardware (bloomtrain.precision), decided once: what follows gets the fitted cfg.
    precision = fit_precision(cfg, device, cpu or (CpuInfo.detect() if device == "cpu" else None))
    cfg = precision.apply(cfg)
    if device == "cpu":
        # x86 CPUs take a microcode assist on every denormal operand: fp32 training steps, whose small
        # gradients and attention probabilities make many, run several times slower without this.
        # Flushing changes values below 1.2e-38 only.
        torch.set_flush_denormal(True)
    rank, world = dist.get_rank(), dist.get_world_size()
    precheck = start_check(cfg)  # the digests of the checkpoint to resume from, checked while the engine is built
    dp = cfg.dp_size(world)
    state = ParallelState.from_sizes(cfg.parallel.tp, cfg.parallel.pp, dp)
    # Megatron's per-stage seed: identical init streams across TP and DP, distinct per pipeline stage.
    seed_everything(cfg.seed + 100 * state.pp_rank)
    pipeline = build_pipeline(cfg.model, state, partition_method=cfg.parallel.partition_method,
                              activation_checkpointing=cfg.parallel.activation_checkpointing, loss_fn=LossFn(state))
    universal = needs_universal(cfg, state)
    engine = build_engine(pipeline, cfg, state, world, train_batch_size=BatchSchedule.from_config(cfg.schedule)(0),
                          load_universal=universal)
    compiled = compile_blocks(pipeline, cfg.model, device)  # model.compile: in place, on each graph's first call
    module = TrainModule(engine, state, vocab_rows=cfg.model.padded_vocab_size(state.tp_size))
    # Rank 0 builds (and caches) the sample indices first; the others then only read the cache.
    if rank == 0:
        train_data, valid_data = build_datasets(cfg)
        valid_sets = build_valid_sets(cfg)
    dist.barrier()
    if rank != 0:
        train_data, valid_data = build_datasets(cfg)
        valid_sets = build_valid_sets(cfg)
    checkpointer = Checkpointer(cfg, module, state, universal=universal, faults=faults, precheck=precheck)
    timing = [CompileTimeCallback(compiled)] if compiled else []
    return Trainer(cfg, module, state, train_data, checkpointer,
                   [*default_callbacks(cfg, Validation(valid_data, list(valid_sets.values())), rank, world,
                                       precision=precision, user=user), *timing, *callbacks])


def run(cfg: TrainConfig, callbacks: Sequence[Callback] = ()) -> TrainResult:
    """Build the trainer (``build_trainer``), resume if a checkpoint exists, train."""
    return build_trainer(cfg, callbacks=callbacks).fit()


if __name__ == "__main__":  # torchrun ... -m bloomtrain.train --config X.yaml [key=value ...]: the `train` CLI
    import sys

    from bloomtrain.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
