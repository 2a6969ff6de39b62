"""Named validation sets (``data.valid_sets``): loss, perplexity and bits per byte of each, every N iterations.

One callback per set, built by the composition root after the run's own ``EvaluationCallback``. Each
evaluation reads the set's fixed samples (bloomtrain.data.build_valid_sets: evenly spaced over its
validation split, the same every time) through ``TrainModule.eval_nll``: DeepSpeed's ``eval_batch`` on
every layout (TP, PP, DP), with the summed NLL made exact from each micro-batch's mean and token count.
Every target token counts, so the set's token count is known on the host: samples x seq_length. Logged
under ``valid/<name>/loss`` (nats per token), ``valid/<name>/ppl`` and ``valid/<name>/bpb``:

    bpb = summed NLL / (ln 2 x UTF-8 bytes of the target tokens)

The bytes come from the tokenizer's per-id byte lengths (bloomtrain.data.token_byte_lengths: special
tokens such as the EOD count 0), summed over the same target tokens on the host, once. Bits per byte
compare models with different tokenizers; a loss per token does not.

Collective: every rank runs every set's evaluation at the same iterations.
"""

from __future__ import annotations

import time

import numpy as np

from bloomdata.errors import BloomstackError
from bloomdata.megatron.builder import FixedSamples
from bloomtrain.callbacks.base import VALID_SETS, Callback, Step, TrainerView
from bloomtrain.data import eval_micro_batches
from bloomtrain.measures import bits_per_byte, perplexity


class ValidSetCallback(Callback):
    priority = VALID_SETS

    def __init__(self, samples: FixedSamples, *, interval: int | None, micro_batch_size: int,
                 byte_lengths: np.ndarray) -> None:
        self.samples, self.interval, self.micro_batch_size = samples, interval, micro_batch_size
        self.byte_lengths = byte_lengths
        self._tokens_bytes: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        return self.samples.name

    def tokens_and_bytes(self) -> tuple[int, int]:
        """(target tokens, their UTF-8 bytes) over the set's samples; computed once (the samples are fixed)."""
        if self._tokens_bytes is None:
            tokens = nbytes = 0
            for k in range(len(self.samples)):
                targets = np.asarray(self.samples[k][1:], dtype=np.int64)
                if targets.size and targets.max() >= len(self.byte_lengths):
                    raise BloomstackError(f"data.valid_sets.{self.name} {self.name}: token id {int(targets.max())} is outside the "
                                     f"tokenizer's {len(self.byte_lengths)} ids; give the tokenizer the data "
                                     "was built with (data.tokenizer)")
                tokens += targets.size
                nbytes += int(self.byte_lengths[targets].sum())
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
        tokens, nbytes = self.tokens_and_bytes()
        loss = nll / tokens
        ppl = perplexity(loss)
        bpb = bits_per_byte(nll, nbytes) if nbytes else float("nan")
        key = f"valid/{self.name}"
        record = {"iteration": step.iteration, f"{key}/loss": loss, f"{key}/ppl": ppl, f"{key}/bpb": bpb}
        console = (f"validation {self.name} at iter {step.iteration} | loss {loss:.4f} | ppl {ppl:.3f} | "
                   f"bpb {bpb:.4f} | {len(self.samples)} samples, {nbytes:,} bytes | {seconds:.2f}s")
        trainer.log(record, step.iteration, console)
