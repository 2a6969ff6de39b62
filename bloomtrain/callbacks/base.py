"""``Callback``: the base class of everything the training loop does besides the step itself.

Modelled on OLMo-core's train/callbacks/callback.py, with a smaller set of hooks. Every hook receives the
``Trainer`` (its ``cfg``, ``module``, ``state``, ``pos``, ``result``, ``checkpointer``); the per-iteration
hooks also receive the ``Step``. Callbacks run in the order of the trainer's list, hook by hook, so one
callback can rely on an earlier one's ``post_step`` (the composition root, bloomtrain.train, documents
its order). A callback asks the loop to end with ``trainer.request_stop(reason)``; it raises to abort.

Per iteration::

    pre_step -> TrainModule.train_step(step.batches) -> counters advance -> post_train_batch -> post_step
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bloomtrain.trainer import Step, Trainer


class Callback:
    def pre_train(self, trainer: Trainer) -> None:
        """Once, after the resume and before the first iteration."""

    def pre_step(self, trainer: Trainer, step: Step) -> None:
        """Before the step: may replace ``step.batches`` with a lazy wrapper (``map``, a generator with a
        plain ``for`` loop) that yields exactly one micro-batch per micro-batch it reads."""

    def post_train_batch(self, trainer: Trainer, step: Step) -> None:
        """Right after the step (``step.output`` set, ``trainer.pos`` advanced), before any ``post_step``:
        inspect the output and add per-iteration values to ``step.metrics``."""

    def post_step(self, trainer: Trainer, step: Step) -> None:
        """Act on the finished iteration: log, evaluate, save, request a stop."""

    def log_metrics(self, trainer: Trainer, record: dict[str, Any], step: int, console: str | None) -> None:
        """A record passed to ``trainer.log`` (with its console line, if any): write it somewhere."""

    def post_train(self, trainer: Trainer) -> None:
        """Once, after the last iteration: the schedule ended or a stop was requested (not after an error)."""

    def close(self, trainer: Trainer) -> None:
        """Always, last (also after an error): release files, handlers."""
