"""Learning-rate and batch-size schedules as pure functions of the samples consumed (Megatron's semantics).

Counting in samples, not iterations, keeps both schedules meaningful while the global batch ramps up, and
makes them trivially resumable: the checkpoint stores two integers, nothing else (no scheduler object with
hidden state). Formulas follow Megatron's ``AnnealingLR`` and ``RampupBatchsizeNumMicroBatches``
(docs/bloom-training.md, "Learning rate and batch ramp-up"):

- lr(n) = lr * n / warmup for n <= warmup (so the very first update uses lr 0, as in Megatron);
  then min_lr + (lr - min_lr) * 0.5 * (1 + cos(pi * (n - warmup) / (decay - warmup))) up to ``decay``;
  then min_lr. ``n`` counts the samples of *applied* updates (a skipped iteration does not advance it).
- batch(n) = start + increment * floor(n / (ramp_samples / num_increments)), capped at the global batch;
  ``n`` counts every consumed sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bloomdata.errors import BloomstackError
from bloomtrain.config import OptimConfig, ScheduleConfig


@dataclass(frozen=True)
class LRSchedule:
    max_lr: float
    min_lr: float
    warmup_samples: int
    decay_samples: int
    style: str = "cosine"

    @classmethod
    def from_config(cls, optim: OptimConfig, schedule: ScheduleConfig) -> LRSchedule:
        decay = schedule.decay_samples
        if decay is None:
            if schedule.train_samples is None:
                raise BloomstackError(
                    "schedule.decay_samples is required with train_iters (the decay is counted in samples); "
                    "set it, e.g. to train_iters x global_batch_size"
                )
            decay = schedule.train_samples
        if schedule.decay_style != "constant" and decay <= schedule.warmup_samples:
            raise BloomstackError(
                f"schedule.decay_samples={decay} must exceed warmup_samples={schedule.warmup_samples}"
            )
        return cls(optim.lr, optim.min_lr, schedule.warmup_samples, decay, schedule.decay_style)

    def __call__(self, samples: int) -> float:
        if self.warmup_samples > 0 and samples <= self.warmup_samples:
            return self.max_lr * samples / self.warmup_samples
        if self.style == "constant":
            return self.max_lr
        if samples > self.decay_samples:
            return self.min_lr
        ratio = (samples - self.warmup_samples) / (self.decay_samples - self.warmup_samples)
        if self.style == "linear":
            coeff = 1.0 - ratio
        else:
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        return self.min_lr + coeff * (self.max_lr - self.min_lr)


@dataclass(frozen=True)
class BatchSchedule:
    global_batch_size: int
    start: int | None = None
    increment: int | None = None
    ramp_samples: int | None = None

    @classmethod
    def from_config(cls, schedule: ScheduleConfig) -> BatchSchedule:
        if schedule.rampup_batch_size is None:
            return cls(schedule.global_batch_size)
        start, increment, ramp = schedule.rampup_batch_size
        diff = schedule.global_batch_size - start
        if start <= 0 or increment <= 0 or ramp <= 0 or diff < 0 or diff % increment:
            raise BloomstackError(
                f"schedule.rampup_batch_size={list(schedule.rampup_batch_size)}: need start > 0, increment > 0, "
                f"samples > 0 and (global_batch_size {schedule.global_batch_size} - start) divisible by increment"
            )
        return cls(schedule.global_batch_size, start, increment, ramp)

    def __call__(self, consumed_samples: int) -> int:
        if self.start is None or self.increment is None or self.ramp_samples is None \
                or consumed_samples > self.ramp_samples:
            return self.global_batch_size
        num_increments = (self.global_batch_size - self.start) // self.increment
        if num_increments == 0:
            return self.global_batch_size
        per_increment = self.ramp_samples / num_increments
        return min(self.global_batch_size, self.start + self.increment * int(consumed_samples / per_increment))


def is_done(schedule: ScheduleConfig, iteration: int, consumed_samples: int) -> bool:
    """Training length in samples or iterations (exactly one is set; the config validates that)."""
    if schedule.train_iters is not None:
        return iteration >= schedule.train_iters
    return consumed_samples >= (schedule.train_samples or 0)
