"""Checkpoint cadence: every ``save_interval`` iterations (or the ``auto`` interval), and once more when training ends.

The end of training is the end of the schedule or a stop request (signal, kill switch, time limit, or any
callback's ``request_stop``); the final save is skipped when that iteration was just saved (or is being saved in
the background), and the run ends only once it is committed: an asynchronous save's background write is waited
for at the end, and after an error too (its tag is then complete on every rank that gets there). What a save
writes, and in which order, is ``Checkpointer``'s business (bloomtrain.checkpoint.checkpointer).

``save_interval: auto`` (bloomtrain.checkpoint.interval): after each of the first saves of a process, the ranks
agree on the save's cost (the ``save`` call's time: the whole save, or the stall of an asynchronous one), the
step time and the last background write (a MAX over ranks, so every rank computes the same interval), and the
interval is recomputed and logged with its inputs.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import torch
import torch.distributed as dist

from bloomtrain.callbacks.base import CHECKPOINT, Callback, Step, TrainerView
from bloomtrain.checkpoint.interval import AutoInterval
from bloomtrain.checkpoint.tags import tag_for

log = logging.getLogger(__name__)


class CheckpointCallback(Callback):
    """Saves every ``save_interval`` iterations and at the end: after every callback that changes its state in
    the iteration (its priority is below theirs), so each saved state is the state after that iteration."""

    priority = CHECKPOINT

    def __init__(self, save_interval: int | Literal["auto"] | None, mtbf_hours: float = 24.0) -> None:
        self.auto = AutoInterval(mtbf_hours) if save_interval == "auto" else None
        self.save_interval = None if save_interval == "auto" else save_interval

    def state_dict(self) -> dict[str, Any]:
        return self.auto.state() if self.auto is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.auto is not None:
            self.auto.load(state)

    def pre_train(self, trainer: TrainerView) -> None:
        if self.auto is not None and trainer.checkpointer.enabled:
            self.auto.last_saved = trainer.pos.iteration
            if self.auto.interval is not None and _rank0():
                log.info("bloomtrain: %s, measured before the resume", self.auto.describe())

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        saves = trainer.checkpointer
        if not saves.enabled:
            return
        if self.auto is not None:
            self.auto.observe_step(step.out.step_time_s)
            if self.auto.due(step.iteration):
                trainer.save_checkpoint()
                self._measured(trainer, step.iteration)
        elif self.save_interval and step.iteration % self.save_interval == 0:
            trainer.save_checkpoint()
        if saves.committed is not None:
            trainer.result.last_saved = saves.committed  # an asynchronous save counts once committed

    def _measured(self, trainer: TrainerView, iteration: int) -> None:
        """After an ``auto`` save: agree on the measurements (collective: every rank saves at this iteration) and
        recompute the interval, for the first saves of this process."""
        assert self.auto is not None
        if not self.auto.wants_recompute():
            self.auto.saved(iteration)
            return
        saves = trainer.checkpointer
        stall, step_s, write_s = _agreed_max([saves.stall_s or 0.0, self.auto.local_step_s(), saves.write_s or 0.0])
        self.auto.saved(iteration, stall, step_s, write_s)
        if _rank0() and self.auto.interval is not None:
            log.info("bloomtrain: %s", self.auto.describe())

    def post_train(self, trainer: TrainerView) -> None:
        saves = trainer.checkpointer
        if not saves.enabled:
            return
        tag = tag_for(trainer.pos.iteration)
        if trainer.result.last_saved != tag and saves.in_flight != tag:
            trainer.save_checkpoint()
        saves.wait()  # the save at exit (end of schedule, signal, kill switch, time limit) is durable before the exit
        trainer.result.last_saved = saves.committed

    def close(self, trainer: TrainerView) -> None:
        """After an error too: a background save still being written is finished (or its failure logged)."""
        saves = trainer.checkpointer
        if not saves.enabled or saves.in_flight is None:
            return
        tag = saves.in_flight
        try:
            saves.wait()
        except Exception as exc:  # noqa: BLE001 - the error that ended the run propagates; this one is logged
            log.warning("bloomtrain: the background save of %s did not complete (%s); latest stays %s",
                        tag, exc, saves.committed)
        else:
            trainer.result.last_saved = saves.committed


def _rank0() -> bool:
    return not dist.is_initialized() or dist.get_rank() == 0


def _agreed_max(values: list[float]) -> list[float]:
    """Collective: the elementwise MAX of ``values`` over every rank (the values on one rank when alone). NCCL
    reduces device tensors only: the values then go to the device and back (once per recomputed interval)."""
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return values
    device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend() == "nccl" else "cpu"
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [float(v) for v in tensor.tolist()]
