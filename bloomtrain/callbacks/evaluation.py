"""Evaluation: every ``interval`` iterations, the mean loss over the first ``eval_iters`` global batches.

Each evaluation reads the same first samples of its dataset (Megatron's fixed validation samples), in the
pretraining sampler's order split over DP ranks, through the engine's ``eval_batch`` (no gradients; the
loss is DP-averaged and broadcast along the pipeline, so every rank gets it). Collective: every rank must
run the same evaluations.

The run's validation set (``name=None``) logs ``valid_loss`` / ``valid_ppl`` and fills
``TrainResult.eval_losses``. Another named dataset is one more instance: ``name="fr"`` logs
``valid/fr/loss`` and ``valid/fr/ppl``; a subclass can override ``report`` to log something else.
The configured named sets (``data.valid_sets``: fixed samples spread over a split, exact sums, bits per
byte) are ``bloomtrain.callbacks.valid_sets``.
"""

from __future__ import annotations

from bloomtrain.callbacks.base import EVALUATION, Callback, Step, TrainerView
from bloomtrain.data import Samples, micro_batches
from bloomtrain.measures import perplexity


class EvaluationCallback(Callback):
    priority = EVALUATION

    def __init__(self, data: Samples | None, *, interval: int | None, eval_iters: int, micro_batch_size: int,
                 name: str | None = None) -> None:
        self.data, self.interval, self.eval_iters = data, interval, eval_iters
        self.micro_batch_size, self.name = micro_batch_size, name

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        if self.data is None or not self.interval or step.iteration % self.interval:
            return
        self.report(trainer, step.iteration, self.evaluate(trainer))

    def evaluate(self, trainer: TrainerView) -> float:
        assert self.data is not None  # post_step evaluates only with validation data
        state = trainer.state
        batches = micro_batches(self.data, 0, self.micro_batch_size, state.dp_rank, state.dp_size)
        losses = [trainer.module.eval_step(batches) for _ in range(self.eval_iters)]
        return sum(losses) / len(losses)

    def report(self, trainer: TrainerView, iteration: int, loss: float) -> None:
        ppl = perplexity(loss)
        if self.name is None:
            trainer.result.eval_losses[iteration] = loss
            record = {"iteration": iteration, "valid_loss": loss, "valid_ppl": ppl}
            console = f"validation at iter {iteration} | loss {loss:.4f} | ppl {ppl:.3f}"
        else:
            record = {"iteration": iteration, f"valid/{self.name}/loss": loss, f"valid/{self.name}/ppl": ppl}
            console = f"validation {self.name} at iter {iteration} | loss {loss:.4f} | ppl {ppl:.3f}"
        trainer.log(record, iteration, console)
