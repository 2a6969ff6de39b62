"""``TrainModule``: the model side of training. It owns the DeepSpeed pipeline engine.

The trainer never touches the engine: it asks this module for one optimizer step over an iterator of
micro-batches (``train_step``), for the exact summed loss of a
fixed set of micro-batches (``eval_nll``), to set the learning rate and the
(ramped) global batch, and to save or load the engine's state under a checkpoint tag. Modelled on
OLMo-core's TrainModule (train/train_module/train_module.py); here the parallelism (TP x PP x DP), the
1F1B schedule, gradient reduction, clipping and the skip of a non-finite step all live inside DeepSpeed's
``PipelineEngine.train_batch`` and the optimizer built by bloomtrain.engine.

The engine's checkpoint files are written through ``DurableCheckpointEngine`` (installed here): each file
atomic and fsynced, so that ``Checkpointer`` can move ``latest`` once every rank returned from ``save``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from bloomdata import durable
from bloomtrain.checkpoint import engine_files
from bloomtrain.data import MicroBatch, to_device
from bloomtrain.parallel.state import ParallelState


@dataclass(frozen=True)
class StepOutput:
    loss: float
    """Mean loss of the global batch (DP-averaged, the same on every rank); NaN when it was not finite."""
    grad_norm: float
    """Global L2 gradient norm before clipping; NaN when the engine reports none."""
    applied: bool
    """The optimizer updated the weights; False when a non-finite norm made it skip the step."""
    step_time_s: float
    """Wall time of the whole step: every micro-batch's forward and backward, reductions, optimizer."""


class TrainModule:
    """``vocab_rows``: the model's embedding rows; every micro-batch the engine reads is checked against them on
    the host, then pinned and copied to the device without blocking (bloomtrain.data.to_device)."""

    def __init__(self, engine, state: ParallelState | None = None, vocab_rows: int | None = None) -> None:
        self.engine = engine
        self.state = state or ParallelState.single()
        self.checkpoint_files = engine_files.install(engine)
        device = torch.device(engine.device)
        engine.set_batch_fn(lambda batch: None if batch is None else to_device(batch, device, vocab_rows))

    # --- hyper-parameters of the next step ------------------------------------------------------------

    def set_global_batch(self, samples: int) -> None:
        """Global batch of the next step in samples (ramp-up); DeepSpeed derives the accumulation steps."""
        if samples != self.engine.train_batch_size():
            self.engine.set_train_batch_size(samples)

    def set_lr(self, lr: float) -> None:
        for group in self.engine.optimizer.param_groups:
            group["lr"] = lr

    # --- steps --------------------------------------------------------------------------------------

    def train_step(self, batches: Iterator[MicroBatch]) -> StepOutput:
        """One optimizer step; reads exactly global batch / (micro batch x DP) micro-batches from ``batches``."""
        start = time.perf_counter()
        # The step's one host sync on purpose: the loss (a device scalar) is read here, so the step time below
        # is the device's time and the callbacks (metrics, spikes, skips) get a float. The BF16 optimizer has
        # already read the global norm to decide on the skip (a float now), so the reads below are free.
        loss = float(self.engine.train_batch(data_iter=batches))
        step_time = time.perf_counter() - start
        norm = self.engine.get_global_grad_norm()
        return StepOutput(loss=loss, grad_norm=float(norm) if norm is not None else float("nan"),
                          applied=bool(self.engine.was_step_applied()), step_time_s=step_time)

    def eval_nll(self, batches: Iterator[MicroBatch], num_micro_batches: int) -> float:
        """Collective: the summed token NLL (nats) of every DP rank's ``num_micro_batches`` micro-batches from
        ``batches``, without gradients; the same float on every rank.

        The engine's ``eval_batch`` averages micro-batch means, which is exact only when every micro-batch
        holds as many scored tokens. Here each micro-batch's mean (fp32, from the last stage's loss) is
        weighted by its loss mask's sum, counted on the host as the engine reads it, and summed in float64;
        then summed over DP and sent from the last pipeline stage to the others. A micro-batch with no
        scored token (padding) adds nothing, though its mean is 0/0.
        """
        counts: list[float] = []

        def counted() -> Iterator[MicroBatch]:
            for batch in batches:
                counts.append(float(batch[1][1].sum()))  # the loss mask; exact below 2**24 tokens
                yield batch

        losses = self.engine.eval_batch(counted(), reduce_output=None, bcast_loss=False,
                                        num_micro_batches=num_micro_batches)
        total = torch.zeros(1, dtype=torch.float64, device=self.engine.device)
        st = self.state
        if st.is_last_stage:
            for loss, count in zip(losses, counts, strict=True):
                if count:
                    total += loss.detach().double().reshape(1) * count
            if st.dp_size > 1:
                dist.all_reduce(total, group=st.dp_group)
        if st.pp_size > 1:
            last = ParallelState.global_rank(st.tp_rank, st.pp_size - 1, st.dp_rank, st.tp_size, st.dp_size)
            dist.broadcast(total, src=last, group=st.pp_group)
        return float(total.item())

    @property
    def skipped_steps(self) -> int:
        """Steps the engine skipped since it was built (DeepSpeed's own counter)."""
        return self.engine.skipped_steps

    # --- checkpoint state ---------------------------------------------------------------------------

    def save(self, ckpt_dir: Path, tag: str, client_state: dict[str, Any], write: durable.Writer = durable.write_with,
             after_file: Callable[[str], None] | None = None,
             host_copy: Callable[[Any], Any] | None = None) -> list[str]:
        """Collective: write the engine's files of ``tag``, each through ``write`` (durable: a save's ledger); returns
        those this rank wrote. ``after_file(path)`` runs after each file (fault-injection tests). ``host_copy``: each
        state goes through it before ``write`` sees it (an asynchronous save's copy to host memory)."""
        files = self.checkpoint_files
        files.after_file, files.write, files.host_copy = after_file, write, host_copy
        try:
            self.engine.save_checkpoint(str(ckpt_dir), tag=tag, client_state=client_state, save_latest=False)
        finally:
            files.after_file, files.write, files.host_copy = None, durable.write_with, None
        return list(files.written)

    def load(self, ckpt_dir: Path, tag: str) -> dict[str, Any] | None:
        """Collective: load weights and optimizer state of ``tag``; returns the client state, None if absent."""
        path, client = self.engine.load_checkpoint(str(ckpt_dir), tag=tag, load_optimizer_states=True,
                                                   load_lr_scheduler_states=False)
        return None if path is None else client
