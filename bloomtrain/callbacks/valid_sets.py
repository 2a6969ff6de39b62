"""Validation during training: the run's overall validation set and the named ones (``data.valid_sets``), one
callback each, one path: every N iterations, the set's summed NLL through ``TrainModule.eval_nll``.

A set is a name and fixed samples, the same at every evaluation: for the overall set, the first
``logging.eval_iters`` global batches of the validation split (Megatron's fixed validation samples,
bloomtrain.data.FirstSamples); for a named set, samples spread evenly over its validation split
(bloomtrain.data.build_valid_sets). ``eval_nll`` runs DeepSpeed's ``eval_batch`` on every layout (TP, PP, DP)
and makes the summed NLL exact from each micro-batch's mean and token count. Every target token counts, so
the set's token count is known on the host: samples x seq_length. What is logged:

- the overall set: ``valid_loss`` (nats per token) and ``valid_ppl``, the console line ``validation at iter N |
  loss L | ppl P``, and ``TrainResult.eval_losses``;
- a named set: ``valid/<name>/loss``, ``valid/<name>/ppl`` and, given the tokenizer's byte lengths (as the
  composition root gives them), ``valid/<name>/bpb``:

      bpb = summed NLL / (ln 2 x UTF-8 bytes of the target tokens)

  The bytes come from the tokenizer's per-id byte lengths (bloomtrain.data.token_byte_lengths: special tokens
  such as the EOD count 0), summed over the same target tokens on the host, once. Bits per byte compare models
  with different tokenizers; a loss per token does not.

Each set also logs its lowest loss so far (``valid_best_loss``, ``valid/<name>/best_loss``), kept in the
checkpoint under the set's ``state_key`` (``valid`` and ``valid/<name>``), so a resumed run goes on from it.

Collective: every rank runs every set's evaluation at the same iterations. The overall set runs first (the
composition root lists it first; equal priorities keep the given order).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from bloomdata.errors import BloomstackError
from bloomtrain.callbacks.base import EVALUATION, Callback, Step, TrainerView
from bloomtrain.data import Samples, eval_micro_batches
from bloomtrain.measures import bits_per_byte, perplexity


class ValidSetCallback(Callback):
    """One validation set: ``overall`` for the run's own (``valid_loss``), else a named one (``valid/<name>/*``,
    with bits per byte from ``byte_lengths``)."""

    priority = EVALUATION

    def __init__(self, name: str, samples: Samples, *, interval: int | None, micro_batch_size: int,
                 byte_lengths: np.ndarray | None = None, overall: bool = False) -> None:
        self.name, self.samples, self.interval, self.micro_batch_size = name, samples, interval, micro_batch_size
        self.byte_lengths, self.overall = byte_lengths, overall
        self._tokens_bytes: tuple[int, int] | None = None
        self.best: tuple[float, int] | None = None  # (lowest loss, its iteration) over every resume

    @property
    def state_key(self) -> str:
        """``valid`` for the overall set, ``valid/<name>`` for a named one (a set name holds no ``/``)."""
        return "valid" if self.overall else f"valid/{self.name}"

    def state_dict(self) -> dict[str, Any]:
        return {} if self.best is None else {"best_loss": self.best[0], "best_iteration": self.best[1]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best = (float(state["best_loss"]), int(state["best_iteration"]))

    def tokens_and_bytes(self) -> tuple[int, int]:
        """(target tokens, their UTF-8 bytes; 0 without ``byte_lengths``) over the set's samples; computed once
        (the samples are fixed)."""
        if self._tokens_bytes is None:
            tokens = nbytes = 0
            lengths = self.byte_lengths
            for k in range(len(self.samples)):
                targets = np.asarray(self.samples[k][1:], dtype=np.int64)
                tokens += targets.size
                if lengths is None:
                    continue
                if targets.size and targets.max() >= len(lengths):
                    raise BloomstackError(f"data.valid_sets.{self.name} {self.name}: token id {int(targets.max())} is "
                                          f"outside the tokenizer's {len(lengths)} ids; give the tokenizer the data "
                                          "was built with (data.tokenizer)")
                nbytes += int(lengths[targets].sum())
            self._tokens_bytes = tokens, nbytes
        return self._tokens_bytes

    def pre_train(self, trainer: TrainerView) -> None:
        self.tokens_and_bytes()  # a wrong tokenizer fails before the first step, not at the first evaluation

    def evaluate(self, trainer: TrainerView) -> float:
        """Collective: the set's summed NLL in nats."""
        state = trainer.state
        batches, count = eval_micro_batches(self.samples, self.micro_batch_size, state.dp_rank, state.dp_size)
        return trainer.module.eval_nll(batches, count)

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        if not self.interval or step.iteration % self.interval or not len(self.samples):
            return
        start = time.perf_counter()
        nll = self.evaluate(trainer)
        seconds = time.perf_counter() - start
        loss = nll / self.tokens_and_bytes()[0]
        if self.best is None or loss < self.best[0]:
            self.best = (loss, step.iteration)
        if self.overall:
            trainer.result.eval_losses[step.iteration] = loss
        self.report(trainer, step.iteration, nll, seconds)

    def report(self, trainer: TrainerView, iteration: int, nll: float, seconds: float) -> None:
        """Log one evaluation: the set's summed NLL (nats), which took ``seconds``."""
        tokens, nbytes = self.tokens_and_bytes()
        loss = nll / tokens
        ppl = perplexity(loss)
        best = self.best[0] if self.best is not None else loss
        if self.overall:
            record = {"iteration": iteration, "valid_loss": loss, "valid_ppl": ppl, "valid_best_loss": best}
            trainer.log(record, iteration, f"validation at iter {iteration} | loss {loss:.4f} | ppl {ppl:.3f}")
            return
        key = f"valid/{self.name}"
        record = {"iteration": iteration, f"{key}/loss": loss, f"{key}/ppl": ppl, f"{key}/best_loss": best}
        console = f"validation {self.name} at iter {iteration} | loss {loss:.4f} | ppl {ppl:.3f}"
        if self.byte_lengths is not None:  # bits per byte: NaN for a set of special tokens only
            record[f"{key}/bpb"] = bpb = bits_per_byte(nll, nbytes) if nbytes else float("nan")
            console += f" | bpb {bpb:.4f}"
        trainer.log(record, iteration, f"{console} | {len(self.samples)} samples, {nbytes:,} bytes | {seconds:.2f}s")
