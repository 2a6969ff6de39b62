"""``Trainer``: the loop. Everything it drives is built elsewhere (bloomtrain.train is the composition root).

One iteration: take the global batch (ramp-up) and the learning rate from the sample counters, let the
callbacks see the step (``pre_step``), run one optimizer step on the train module (DeepSpeed's 1F1B
pipeline schedule over every micro-batch, gradient reduction, clip, AdamW), advance the counters, and hand
the result to the callbacks (``post_train_batch``, then ``post_step``). Evaluation, metrics, checkpoints,
stop requests, stability checks and drills are all callbacks (bloomtrain.callbacks): a new behaviour is a
new callback, not an edit of this loop. The split follows OLMo-core's Trainer / TrainModule / Callback.

Counters (``Position``, saved in the checkpoint, identical on every rank): ``iteration`` (optimizer
iterations attempted), ``consumed_samples`` (drives the data position and the batch ramp-up),
``scheduled_samples`` (samples of applied updates; drives the LR, like Megatron's scheduler which only
steps on successful updates), ``skipped_iters`` and ``consecutive_skips``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from bloomtrain.callbacks.base import Callback, Position, Step, TrainResult, by_priority, by_state_key
from bloomtrain.checkpoint.checkpointer import Checkpointer
from bloomtrain.checkpoint.tags import tag_for
from bloomtrain.config import TrainConfig
from bloomtrain.data import MicroBatch, Samples, micro_batches
from bloomtrain.exit_record import ExitKind
from bloomtrain.parallel.state import ParallelState
from bloomtrain.schedules import BatchSchedule, LRSchedule, is_done
from bloomtrain.train_module import TrainModule

log = logging.getLogger(__name__)


class Trainer:
    """The loop; to its callbacks, a ``bloomtrain.callbacks.base.TrainerView``. ``callbacks`` run by priority
    (``by_priority``), whatever the order of the list."""

    def __init__(self, cfg: TrainConfig, module: TrainModule, state: ParallelState, train_data: Samples,
                 checkpointer: Checkpointer, callbacks: Sequence[Callback]) -> None:
        self.cfg, self.module, self.state = cfg, module, state
        self.train_data, self.checkpointer, self.callbacks = train_data, checkpointer, by_priority(list(callbacks))
        self.stateful = by_state_key(self.callbacks)  # refuses two stateful callbacks under one key
        self.lr_schedule = LRSchedule.from_config(cfg.optim, cfg.schedule)
        self.batch_schedule = BatchSchedule.from_config(cfg.schedule)
        self.pos = Position()
        self.result = TrainResult(position=self.pos)
        self.stop_reason: str | None = None
        self.stop_kind = ExitKind.FINISHED

    # --- what callbacks call (bloomtrain.callbacks.base.TrainerView) ---------------------------------------

    def request_stop(self, reason: str, kind: ExitKind = ExitKind.FINISHED) -> None:
        """End the run after this iteration (the first reason wins); post_train hooks still run. ``kind`` is the
        exit record's kind for it (time budget, signal, kill switch, ...)."""
        if self.stop_reason is None:
            self.stop_reason, self.stop_kind = reason, kind

    def save_checkpoint(self, wait: bool = False) -> str:
        """Collective: save the current position and the callbacks' states; returns the tag. ``wait``: return once
        it is committed (``checkpoint.async_save`` otherwise writes it in the background). ``result.last_saved``
        names the newest committed checkpoint."""
        tag = self.checkpointer.save(self.pos.iteration, self.pos.as_dict(), self.callback_states())
        if wait:
            self.checkpointer.wait()
        self.result.last_saved = self.checkpointer.committed
        return tag

    def callback_states(self) -> dict[str, dict[str, Any]]:
        """The non-empty ``state_dict`` of every stateful callback, by ``state_key``."""
        states = {key: cb.state_dict() for key, cb in self.stateful.items()}
        return {key: state for key, state in states.items() if state}

    def log(self, record: dict[str, Any], step: int, console: str | None = None) -> None:
        """Hand a metrics record (and its console line) to every callback's ``log_metrics``."""
        for cb in self.callbacks:
            cb.log_metrics(self, record, step, console)

    # --- the loop -----------------------------------------------------------------------------------

    def resume(self) -> None:
        saved = self.checkpointer.load() if self.checkpointer.enabled else None
        if saved is not None:
            self.pos = self.result.position = Position(**saved.position)
            for key, cb in self.stateful.items():
                if key in saved.callbacks:
                    cb.load_state_dict(saved.callbacks[key])
            unclaimed = sorted(set(saved.callbacks) - set(self.stateful))
            if unclaimed:
                log.warning("bloomtrain: the checkpoint holds state for callbacks this run does not have: %s "
                            "(their state_key changed or they were removed); it is not used", ", ".join(unclaimed))
            self.result.last_saved = tag_for(self.pos.iteration)
            log.info("bloomtrain: resumed at iteration %d, %d samples consumed", self.pos.iteration,
                     self.pos.consumed_samples)

    def fit(self) -> TrainResult:
        """Resume, train until the schedule ends or a stop is requested, and return what happened. An error
        reaches every callback's ``on_error``, then propagates."""
        try:
            return self._fit()
        except BaseException as error:
            for cb in self.callbacks:
                cb.on_error(self, error)
            raise
        finally:
            for cb in self.callbacks:
                cb.close(self)

    def _fit(self) -> TrainResult:
        self.resume()
        for cb in self.callbacks:
            cb.pre_train(self)
        s = self.cfg.schedule
        data = micro_batches(self.train_data, self.pos.consumed_samples, s.micro_batch_size,
                             self.state.dp_rank, self.state.dp_size)
        while self.stop_reason is None and not is_done(s, self.pos.iteration, self.pos.consumed_samples):
            self._iteration(data)
        for cb in self.callbacks:
            cb.post_train(self)
        if self.stop_reason is not None:
            self.result.stopped_by, self.result.stop_kind = self.stop_reason, self.stop_kind
            log.info("bloomtrain: stopping at iteration %d (%s); checkpoint %s", self.pos.iteration,
                     self.stop_reason, self.result.last_saved)
        return self.result

    def _iteration(self, data: Iterator[MicroBatch]) -> None:
        pos = self.pos
        step = Step(iteration=pos.iteration + 1, global_batch=self.batch_schedule(pos.consumed_samples),
                    lr=self.lr_schedule(pos.scheduled_samples), batches=data)
        for cb in self.callbacks:
            cb.pre_step(self, step)
        self.module.set_global_batch(step.global_batch)
        self.module.set_lr(step.lr)
        step.output = self.module.train_step(step.batches)
        pos.advance(step.global_batch, step.output.applied)
        self.result.losses[step.iteration] = step.output.loss
        self.result.grad_norms[step.iteration] = step.output.grad_norm
        self.result.global_batches[step.iteration] = step.global_batch
        for cb in self.callbacks:
            cb.post_train_batch(self, step)
        for cb in self.callbacks:
            cb.post_step(self, step)
