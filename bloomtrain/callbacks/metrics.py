"""Metrics: the launch's header, the iteration record every ``log_interval`` iterations, and the sink of every
``trainer.log``.

The header (throughput formula, wall-clock time, the iteration resumed after, hardware and software) is written
once per launch, before the first iteration. The record (iteration, loss, lr, grad norm, batch, sample and token
counters, step time, wall-clock time, memory, skips, whatever earlier callbacks put in ``step.metrics``,
throughput) goes to ``metrics.jsonl``, TensorBoard and the console through bloomtrain.metrics.Metrics, on global
rank 0 only. The times give a run's wall time over every launch (``bloomtrain.metrics.read_launches``).
"""

from __future__ import annotations

import time
from typing import Any

from bloomtrain.callbacks.base import METRICS, Callback, Step, TrainerView
from bloomtrain.config import TrainConfig
from bloomtrain.metrics import Metrics, memory_gib, progress_line
from bloomtrain.precision import PrecisionChoice


class MetricsCallback(Callback):
    priority = METRICS

    def __init__(self, cfg: TrainConfig, rank: int, world_size: int, precision: PrecisionChoice | None = None) -> None:
        self.cfg, self.precision = cfg, precision
        self.writer = Metrics(cfg, rank, world_size)

    def pre_train(self, trainer: TrainerView) -> None:
        self.writer.describe(trainer.pos.iteration, self.precision)  # the launch's header, with its precision

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        if not self.writer.enabled or step.iteration % self.cfg.logging.log_interval:
            return
        pos, out = trainer.pos, step.out
        record: dict[str, Any] = {
            "iteration": step.iteration,
            "loss": out.loss,
            "lr": step.lr,
            "grad_norm": out.grad_norm,
            "global_batch": step.global_batch,
            "consumed_samples": pos.consumed_samples,
            "consumed_tokens": pos.consumed_samples * self.cfg.model.seq_length,
            "step_time_s": out.step_time_s,
            "time": round(time.time(), 3),  # unix seconds: wall time across launches
            "memory_gib": memory_gib(),
            "skipped_iters": pos.skipped_iters,
            **step.metrics,
            **self.writer.throughput(step.global_batch, out.step_time_s),
        }
        trainer.log(record, step.iteration, progress_line(record, self.cfg.schedule.train_iters))

    def log_metrics(self, trainer: TrainerView, record: dict[str, Any], step: int, console: str | None) -> None:
        self.writer.log(record, step, console)

    def close(self, trainer: TrainerView) -> None:
        self.writer.close()
