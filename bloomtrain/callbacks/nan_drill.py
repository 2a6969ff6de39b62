"""The NaN drill (``stability.inject_nan_at_iters``): exercise the skip path of a real run end to end.

At the listed iterations every micro-batch's loss mask is replaced by NaN before the engine reads it. The
masked mean loss is then NaN on the last pipeline stage, LossFn turns it into NaN gradients everywhere,
the global norm is NaN and the optimizer skips the update, exactly as for a genuine overflow. Poisoning
the data, not the loss function, keeps LossFn stateless and touches nothing but that iteration's batches.
"""

from __future__ import annotations

import torch

from bloomtrain.callbacks.base import DRILL, Callback, Step, TrainerView
from bloomtrain.data import MicroBatch


def poison(batch: MicroBatch) -> MicroBatch:
    """The same micro-batch with a NaN loss mask."""
    tokens, (labels, loss_mask) = batch
    return tokens, (labels, torch.full_like(loss_mask, float("nan")))


class NanDrillCallback(Callback):
    priority = DRILL  # before any other pre_step hook reads the batches

    def __init__(self, iterations: tuple[int, ...] | list[int]) -> None:
        self.iterations = frozenset(iterations)
        """1-based iterations whose loss is made NaN."""

    def pre_step(self, trainer: TrainerView, step: Step) -> None:
        if step.iteration in self.iterations:
            step.batches = map(poison, step.batches)
