"""``Trainer``: the loop. Everything it drives is built elsewhere (bloomtrain.train is the composition root).

One iteration: set the global batch (ramp-up) and the learning rate from the sample counters, run
DeepSpeed's 1F1B pipeline schedule (``engine.train_batch``: forward/backward of every micro-batch, tied and
DP gradient reduction, clip, AdamW), update the counters, log, maybe evaluate, maybe save, maybe stop.

Counters (all saved in the checkpoint, all identical on every rank):
``iteration`` (optimizer iterations attempted), ``consumed_samples`` (drives the data position and the
batch ramp-up), ``scheduled_samples`` (samples of applied updates; drives the LR, like Megatron's
scheduler which only steps on successful updates), ``skipped_iters`` and ``consecutive_skips``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bloomdata.errors import BloomstackError
from bloomtrain.callbacks.stop_requests import StopRequests
from bloomtrain.checkpoint.checkpointer import Checkpointer
from bloomtrain.config import TrainConfig
from bloomtrain.data import micro_batches
from bloomtrain.engine import set_lr
from bloomtrain.metrics import Metrics, memory_gib, progress_line
from bloomtrain.parallel.pipeline import LossFn
from bloomtrain.parallel.state import ParallelState
from bloomtrain.schedules import BatchSchedule, LRSchedule, is_done


@dataclass
class Position:
    iteration: int = 0
    consumed_samples: int = 0
    scheduled_samples: int = 0
    skipped_iters: int = 0
    consecutive_skips: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class TrainResult:
    losses: dict[int, float] = field(default_factory=dict)
    """Loss per iteration run in this process (1-based iteration numbers)."""
    eval_losses: dict[int, float] = field(default_factory=dict)
    grad_norms: dict[int, float] = field(default_factory=dict)
    global_batches: dict[int, int] = field(default_factory=dict)
    stopped_by: str | None = None
    last_saved: str | None = None
    position: Position | None = None


class Trainer:
    def __init__(self, cfg: TrainConfig, engine, state: ParallelState, train_data: Sequence,
                 valid_data: Sequence | None, loss_fn: LossFn, checkpointer: Checkpointer, metrics: Metrics,
                 stop: StopRequests) -> None:
        self.cfg, self.engine, self.state = cfg, engine, state
        self.train_data, self.valid_data = train_data, valid_data
        self.loss_fn, self.checkpointer, self.metrics, self.stop = loss_fn, checkpointer, metrics, stop
        self.lr_schedule = LRSchedule.from_config(cfg.optim, cfg.schedule)
        self.batch_schedule = BatchSchedule.from_config(cfg.schedule)
        self.pos = Position()
        self.resumed_tag: str | None = None

    # --- pieces -------------------------------------------------------------------------------------

    def resume(self) -> None:
        saved = self.checkpointer.load() if self.checkpointer.enabled else None
        if saved is not None:
            self.pos = Position(**saved)
            self.resumed_tag = f"global_step{self.pos.iteration}"
            if self.metrics.enabled:
                print(f"bloomtrain: resumed at iteration {self.pos.iteration}, "
                      f"{self.pos.consumed_samples} samples consumed", flush=True)

    def _data_iter(self):
        s = self.cfg.schedule
        return micro_batches(self.train_data, self.pos.consumed_samples, s.micro_batch_size,
                             self.state.dp_rank, self.state.dp_size)

    def evaluate(self) -> float | None:
        if self.valid_data is None:
            return None
        s = self.cfg.schedule
        it = micro_batches(self.valid_data, 0, s.micro_batch_size, self.state.dp_rank, self.state.dp_size)
        losses = [float(self.engine.eval_batch(it)) for _ in range(self.cfg.logging.eval_iters)]
        return sum(losses) / len(losses)

    def save(self) -> str:
        return self.checkpointer.save(self.pos.iteration, self.pos.as_dict())

    # --- the loop -----------------------------------------------------------------------------------

    def fit(self) -> TrainResult:
        cfg, pos = self.cfg, self.pos
        result = TrainResult(position=pos, last_saved=self.resumed_tag)
        data = self._data_iter()
        self.metrics.describe()
        while not is_done(cfg.schedule, pos.iteration, pos.consumed_samples):
            batch = self.batch_schedule(pos.consumed_samples)
            if batch != self.engine.train_batch_size():
                self.engine.set_train_batch_size(batch)
            lr = self.lr_schedule(pos.scheduled_samples)
            set_lr(self.engine, lr)
            self.loss_fn.poison = (pos.iteration + 1) in cfg.stability.inject_nan_at_iters

            start = time.perf_counter()
            loss = float(self.engine.train_batch(data_iter=data))
            step_time = time.perf_counter() - start
            self.loss_fn.poison = False

            applied = bool(getattr(self.engine, "_step_applied", True))
            grad_norm = self.engine.get_global_grad_norm()
            grad_norm = float(grad_norm) if grad_norm is not None else float("nan")
            pos.iteration += 1
            pos.consumed_samples += batch
            if applied:  # LossFn turns a non-finite loss into NaN grads, so it is never applied
                pos.scheduled_samples += batch
                pos.consecutive_skips = 0
            else:
                pos.skipped_iters += 1
                pos.consecutive_skips += 1
            result.losses[pos.iteration] = loss
            result.grad_norms[pos.iteration] = grad_norm
            result.global_batches[pos.iteration] = batch
            self._log(loss, lr, grad_norm, batch, step_time, applied)

            if cfg.logging.eval_interval and pos.iteration % cfg.logging.eval_interval == 0:
                val = self.evaluate()
                if val is not None:
                    result.eval_losses[pos.iteration] = val
                    self.metrics.log({"iteration": pos.iteration, "valid_loss": val,
                                      "valid_ppl": math.exp(min(val, 700.0))}, pos.iteration,
                                     f"validation at iter {pos.iteration} | loss {val:.4f} | "
                                     f"ppl {math.exp(min(val, 700.0)):.3f}")

            if pos.consecutive_skips >= cfg.stability.max_consecutive_skips:
                if self.checkpointer.enabled:
                    result.last_saved = self.save()
                raise BloomstackError(
                    f"{pos.consecutive_skips} consecutive iterations had a non-finite loss or gradient norm "
                    f"(last at iteration {pos.iteration}); saved {result.last_saved or 'nothing (no checkpoint.dir)'}"
                    "; lower optim.lr, check the data around this sample, or resume from an earlier checkpoint"
                )
            reason = self.stop.check()
            interval = cfg.checkpoint.save_interval
            if self.checkpointer.enabled and (reason or (interval and pos.iteration % interval == 0)):
                result.last_saved = self.save()
            if reason:
                result.stopped_by = reason
                if self.metrics.enabled:
                    print(f"bloomtrain: stopping at iteration {pos.iteration} ({reason}); "
                          f"checkpoint {result.last_saved}", flush=True)
                return result
        if self.checkpointer.enabled and result.last_saved != f"global_step{pos.iteration}":
            result.last_saved = self.save()
        return result

    def _log(self, loss: float, lr: float, grad_norm: float, batch: int, step_time: float, applied: bool) -> None:
        pos, m = self.pos, self.metrics
        spike = m.loss_spike(loss)
        if spike and m.enabled:
            print(f"bloomtrain: loss spike at iteration {pos.iteration}: {loss:.4f}", flush=True)
        if not applied and m.enabled:
            print(f"bloomtrain: iteration {pos.iteration} skipped (loss {loss}, grad norm {grad_norm}); "
                  f"{pos.consecutive_skips} in a row", flush=True)
        if not m.enabled or pos.iteration % self.cfg.logging.log_interval:
            return
        record: dict[str, Any] = {
            "iteration": pos.iteration,
            "loss": loss,
            "lr": lr,
            "grad_norm": grad_norm,
            "global_batch": batch,
            "consumed_samples": pos.consumed_samples,
            "consumed_tokens": pos.consumed_samples * self.cfg.model.seq_length,
            "step_time_s": step_time,
            "memory_gib": memory_gib(),
            "skipped_iters": pos.skipped_iters,
            "loss_spike": int(spike),
            **m.throughput(batch, step_time),
        }
        m.log(record, pos.iteration, progress_line(record, self.cfg.schedule.train_iters))
