"""``Callback``: the base class of everything the training loop does besides the step itself.

Modelled on OLMo-core's train/callbacks/callback.py, with a smaller set of hooks. Every hook receives the
``Trainer`` (its ``cfg``, ``module``, ``state``, ``pos``, ``result``, ``checkpointer``); the per-iteration
hooks also receive the ``Step``. Callbacks run in the order of the trainer's list, hook by hook, so one
callback can rely on an earlier one's ``post_step`` (the composition root, bloomtrain.train, documents
its order). A callback asks the loop to end with ``trainer.request_stop(reason)``; it raises to abort.

Per iteration::

    pre_step -> TrainModule.train_step(step.batches) -> counters advance -> post_train_batch -> post_step

State: a callback that carries state across iterations (a running mean, a counter) returns it from
``state_dict`` (JSON-able values) and takes it back in ``load_state_dict``; the trainer saves every non-empty
state in each checkpoint under the callback's ``state_key`` and hands it back on resume, so a resumed run
behaves as the uninterrupted one. The state must be the same on every rank (it is read back from the
files the model-parallel ranks write). An error raised inside the loop reaches every ``on_error`` hook,
then ``close``, then propagates.

A user adds a callback without editing bloomtrain.train: ``callbacks: [{target: "pkg.module:MyCallback",
args: {...}}]`` in the training config (``bloomtrain.callbacks.configured``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bloomtrain.trainer import Step, Trainer


class Callback:
    @property
    def state_key(self) -> str:
        """The name its state is saved under in a checkpoint (unique among the run's stateful callbacks)."""
        return type(self).__qualname__

    def state_dict(self) -> dict[str, Any]:
        """What must survive a resume (JSON-able values); {} for a stateless callback."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take back what ``state_dict`` returned before the checkpoint (called before ``pre_train``)."""

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

    def on_error(self, trainer: Trainer, error: BaseException) -> None:
        """The loop (or a hook) raised ``error``: react (log, flush, record) before ``close``; the error then
        propagates. Not a place to save a checkpoint: the step that failed may have left the engine mid-update."""

    def close(self, trainer: Trainer) -> None:
        """Always, last (also after an error): release files, handlers."""
