"""Checkpoint cadence: every ``save_interval`` iterations, and once more when training ends.

The end of training is the end of the schedule or a stop request (signal, kill switch, time limit, or any
callback's ``request_stop``); the final save is skipped when that iteration was just saved. What a save
writes, and in which order, is ``Checkpointer``'s business (bloomtrain.checkpoint.checkpointer).
"""

from __future__ import annotations

from bloomtrain.callbacks.base import CHECKPOINT, Callback, Step, TrainerView
from bloomtrain.checkpoint.tags import tag_for


class CheckpointCallback(Callback):
    """Saves every ``save_interval`` iterations and at the end: after every callback that changes its state in
    the iteration (its priority is below theirs), so each saved state is the state after that iteration."""

    priority = CHECKPOINT

    def __init__(self, save_interval: int | None) -> None:
        self.save_interval = save_interval

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        if trainer.checkpointer.enabled and self.save_interval and step.iteration % self.save_interval == 0:
            trainer.save_checkpoint()

    def post_train(self, trainer: TrainerView) -> None:
        if trainer.checkpointer.enabled and trainer.result.last_saved != tag_for(trainer.pos.iteration):
            trainer.save_checkpoint()
