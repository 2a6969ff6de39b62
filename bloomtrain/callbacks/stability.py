"""Training stability: skipped (non-finite) steps, the limit on consecutive ones, and loss spikes.

A step whose loss or gradient norm is not finite is skipped by the optimizer (LossFn makes a non-finite
loss poison every gradient; bloomtrain.engine skips on a non-finite norm), and the trainer counts it in
``pos.skipped_iters`` / ``pos.consecutive_skips`` (saved with the checkpoint). This callback reports each
skip, and after ``max_consecutive_skips`` in a row saves a checkpoint and stops the run with an error:
an isolated bad batch is survivable, a run that diverged is not, and resuming from an earlier
checkpoint with a lower LR or other data is then the user's call. Loss spikes are only flagged
(``loss_spike`` in the iteration's record, and a console line).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from bloomdata.errors import BloomstackError
from bloomtrain.callbacks.base import STABILITY, Callback, Step, TrainerView
from bloomtrain.config import StabilityConfig

log = logging.getLogger(__name__)


class LossSpikes:
    """Flags a loss above ``factor`` x its running mean (EMA, decay 0.9, over finite losses only). The mean is
    the state a resume must restore, or the first iterations after it would compare against nothing."""

    def __init__(self, factor: float) -> None:
        self.factor = factor
        self.mean: float | None = None

    def __call__(self, loss: float) -> bool:
        if not math.isfinite(loss):
            return False
        spike = self.mean is not None and loss > self.factor * self.mean
        self.mean = loss if self.mean is None else 0.9 * self.mean + 0.1 * loss
        return spike


class StabilityCallback(Callback):
    priority = STABILITY

    def __init__(self, cfg: StabilityConfig) -> None:
        self.max_consecutive_skips = cfg.max_consecutive_skips
        self.spikes = LossSpikes(cfg.spike_factor)

    def state_dict(self) -> dict[str, Any]:
        return {"loss_mean": self.spikes.mean}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.spikes.mean = state.get("loss_mean")

    def post_train_batch(self, trainer: TrainerView, step: Step) -> None:
        out, pos = step.out, trainer.pos
        spike = self.spikes(out.loss)
        step.metrics["loss_spike"] = int(spike)
        if spike:
            log.info("bloomtrain: loss spike at iteration %d: %.4f", step.iteration, out.loss)
        if not out.applied:
            log.info("bloomtrain: iteration %d skipped (loss %s, grad norm %s); %d in a row",
                     step.iteration, out.loss, out.grad_norm, pos.consecutive_skips)

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        pos = trainer.pos
        if pos.consecutive_skips < self.max_consecutive_skips:
            return
        if trainer.checkpointer.enabled:
            trainer.save_checkpoint(wait=True)
        raise BloomstackError(
            f"{pos.consecutive_skips} consecutive iterations had a non-finite loss or gradient norm "
            f"(last at iteration {pos.iteration}); saved {trainer.result.last_saved or 'nothing (no checkpoint.dir)'}"
            "; lower optim.lr, check the data around this sample, or resume from an earlier checkpoint"
        )
