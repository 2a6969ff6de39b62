"""``Callback``: the base class of everything the training loop does besides the step itself, and what its hooks
receive: the ``TrainerView`` (the members of the trainer a callback may use), the ``Step``, the ``Position``.

Modelled on OLMo-core's train/callbacks/callback.py, with a smaller set of hooks. Every hook receives the
trainer as a ``TrainerView``; the per-iteration hooks also receive the ``Step``. The trainer (bloomtrain.trainer)
implements the view and imports this module, never the other way round.

Order: each callback declares its ``priority`` (as OLMo-core's do); the trainer runs every hook over its
callbacks from the highest priority to the lowest, in the order they were given among equals. So the order
does not depend on the list a caller builds: the profiler wraps the step closest, the drill poisons the batch
before anyone reads it, the iteration is logged before the evaluations, the skip limit and the stop requests
come before a user's callbacks (0, the default), the checkpoint saves after every callback that changes its
state in the iteration, and the exit record is written last, naming that checkpoint. A callback asks the loop
to end with ``trainer.request_stop(reason, kind)``; it raises to abort.

Per iteration::

    pre_step -> TrainModule.train_step(step.batches) -> counters advance -> post_train_batch -> post_step

State: a callback that carries state across iterations (a running mean, a counter) returns it from
``state_dict`` (JSON-able values) and takes it back in ``load_state_dict``; the trainer saves every non-empty
state in each checkpoint under the callback's ``state_key`` and hands it back on resume, so a resumed run
behaves as the uninterrupted one. The key is a stable name, not a place in a list: the class's name by
default, and a callback of which a run may hold several (a validation set, a user's callback configured twice)
names itself from its arguments; the trainer refuses two stateful callbacks under one key (``by_state_key``).
The state must be the same on every rank (it is read back from the files the model-parallel ranks write). An error
raised inside the loop reaches every ``on_error`` hook, then ``close``, then propagates.

A user adds a callback without editing bloomtrain.train: ``callbacks: [{target: "pkg.module:MyCallback",
args: {...}}]`` in the training config (``bloomtrain.callbacks.configured``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from bloomdata.errors import BloomstackError
from bloomtrain.data import MicroBatch
from bloomtrain.exit_record import ExitKind
from bloomtrain.parallel.state import ParallelState
from bloomtrain.train_module import StepOutput, TrainModule

# Priorities of the project's callbacks (higher runs first; a user's callback is 0 unless it says otherwise).
PROFILE = 110  # the profiler starts before every other hook of its first iteration, stops first after its last step
DRILL = 100  # poisons the batches before any other hook reads them
METRICS = 90  # logs the iteration before the evaluations log theirs
STRAGGLERS = 85  # times each rank's step: its post_train_batch adds to the record METRICS logs in post_step
EVALUATION = 80  # the validation sets (the overall one first, then each named one: the order given)
STABILITY = 50  # the skip limit (saves and raises)
STOP_REQUESTS = 40  # signals, kill switch, time budget
USER = 0  # the default: a user's callbacks
CHECKPOINT = -100  # saves after every callback above has changed its state for the iteration
HANG = -150  # the hang watchdog: an iteration is finished once every hook before it ran, the save included
EXIT_RECORD = -200  # last: names the checkpoint saved


@dataclass
class Position:
    """The loop's counters, saved in every checkpoint and identical on every rank."""

    iteration: int = 0
    consumed_samples: int = 0
    scheduled_samples: int = 0
    skipped_iters: int = 0
    consecutive_skips: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)

    def advance(self, global_batch: int, applied: bool) -> None:
        self.iteration += 1
        self.consumed_samples += global_batch
        if applied:  # LossFn turns a non-finite loss into NaN grads, so it is never applied
            self.scheduled_samples += global_batch
            self.consecutive_skips = 0
        else:
            self.skipped_iters += 1
            self.consecutive_skips += 1


@dataclass
class Step:
    """One iteration as the callbacks see it."""

    iteration: int
    """1-based number of this iteration."""
    global_batch: int
    """Samples in this iteration's global batch."""
    lr: float
    batches: Iterator[MicroBatch]
    """This rank's micro-batches; ``pre_step`` hooks may wrap it."""
    output: StepOutput | None = None
    """Set after the step (loss, grad norm, applied, step time)."""
    metrics: dict[str, Any] = field(default_factory=dict)
    """Extra values for this iteration's metrics record, added by ``post_train_batch`` hooks."""

    @property
    def out(self) -> StepOutput:
        """The step's output, for the hooks that run after it (``post_train_batch``, ``post_step``)."""
        assert self.output is not None, "the step has not run yet (pre_step)"
        return self.output


@dataclass
class TrainResult:
    losses: dict[int, float] = field(default_factory=dict)
    """Loss per iteration run in this process (1-based iteration numbers)."""
    eval_losses: dict[int, float] = field(default_factory=dict)
    grad_norms: dict[int, float] = field(default_factory=dict)
    global_batches: dict[int, int] = field(default_factory=dict)
    stopped_by: str | None = None
    stop_kind: ExitKind | None = None
    """Why the loop ended early, as an exit record's kind."""
    last_saved: str | None = None
    position: Position | None = None


class Saves(Protocol):
    """The checkpointer as callbacks see it."""

    @property
    def enabled(self) -> bool:
        """Whether the run saves checkpoints (checkpoint.dir is set)."""

    @property
    def committed(self) -> str | None:
        """The newest checkpoint of this run (saved or resumed from) whose files are durable on every rank."""

    @property
    def in_flight(self) -> str | None:
        """The tag an asynchronous save is writing in the background (None: none)."""

    @property
    def stall_s(self) -> float | None:
        """Seconds the last save held training (the whole save when synchronous)."""

    @property
    def write_s(self) -> float | None:
        """Seconds the last finished background save took (None: none finished)."""

    @property
    def progress_at(self) -> float | None:
        """``time.monotonic()`` when the background save not yet waited for last progressed: started, wrote a file,
        ended (None: none). The hang watchdog counts it as progress: a save that waits for a long write is not hung."""

    def wait(self) -> str | None:
        """Block until a background save is committed (its error raised here); returns ``committed``."""


class TrainerView(Protocol):
    """The members of the trainer a callback uses: read ``state``, ``module``, ``pos``, ``result``,
    ``checkpointer`` and the stop request; call ``request_stop``, ``save_checkpoint`` and ``log``."""

    @property
    def state(self) -> ParallelState: ...

    @property
    def module(self) -> TrainModule: ...

    @property
    def pos(self) -> Position: ...

    @property
    def result(self) -> TrainResult: ...

    @property
    def checkpointer(self) -> Saves: ...

    @property
    def stop_reason(self) -> str | None:
        """The first stop requested in this run (None: none)."""

    @property
    def stop_kind(self) -> ExitKind:
        """The exit record's kind of that stop (``ExitKind.FINISHED`` while none was requested)."""

    def request_stop(self, reason: str, kind: ExitKind = ExitKind.FINISHED) -> None:
        """End the run after this iteration (the first request wins); post_train hooks still run."""

    def save_checkpoint(self, wait: bool = False) -> str:
        """Collective: save the current position and every callback's state; returns the tag. ``wait``: return once
        it is committed (an asynchronous save otherwise goes on in the background)."""

    def log(self, record: dict[str, Any], step: int, console: str | None = None) -> None:
        """Hand a metrics record (and its console line) to every callback's ``log_metrics``."""


class Callback:
    priority: ClassVar[int] = USER
    """Hooks run from the highest priority to the lowest (see the module docstring)."""

    @property
    def state_key(self) -> str:
        """The name its state is saved under in a checkpoint, unique among the run's stateful callbacks: the class's
        name; override it (from the constructor's arguments) in a callback a run may hold more than once."""
        return type(self).__qualname__

    def state_dict(self) -> dict[str, Any]:
        """What must survive a resume (JSON-able values); {} for a stateless callback."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take back what ``state_dict`` returned before the checkpoint (called before ``pre_train``)."""

    def pre_train(self, trainer: TrainerView) -> None:
        """Once, after the resume and before the first iteration."""

    def pre_step(self, trainer: TrainerView, step: Step) -> None:
        """Before the step: may replace ``step.batches`` with a lazy wrapper (``map``, a generator with a
        plain ``for`` loop) that yields exactly one micro-batch per micro-batch it reads."""

    def post_train_batch(self, trainer: TrainerView, step: Step) -> None:
        """Right after the step (``step.output`` set, ``trainer.pos`` advanced), before any ``post_step``:
        inspect the output and add per-iteration values to ``step.metrics``."""

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        """Act on the finished iteration: log, evaluate, save, request a stop."""

    def log_metrics(self, trainer: TrainerView, record: dict[str, Any], step: int, console: str | None) -> None:
        """A record passed to ``trainer.log`` (with its console line, if any): write it somewhere."""

    def post_train(self, trainer: TrainerView) -> None:
        """Once, after the last iteration: the schedule ended or a stop was requested (not after an error)."""

    def on_error(self, trainer: TrainerView, error: BaseException) -> None:
        """The loop (or a hook) raised ``error``: react (log, flush, record) before ``close``; the error then
        propagates. Not a place to save a checkpoint: the step that failed may have left the engine mid-update."""

    def close(self, trainer: TrainerView) -> None:
        """Always, last (also after an error): release files, handlers."""


def by_priority(callbacks: list[Callback]) -> list[Callback]:
    """``callbacks`` in the order their hooks run: highest ``priority`` first, the given order among equals."""
    return sorted(callbacks, key=lambda cb: -cb.priority)


def by_state_key(callbacks: list[Callback]) -> dict[str, Callback]:
    """The stateful callbacks (those that override ``state_dict``) by ``state_key``; two under one key is an error
    (a resume could hand one the other's state)."""
    keyed: dict[str, Callback] = {}
    for cb in callbacks:
        if type(cb).state_dict is Callback.state_dict:
            continue
        key = cb.state_key
        if key in keyed:
            cls = type(cb)
            raise BloomstackError(f"callbacks: {cls.__module__}:{cls.__qualname__} and {type(keyed[key]).__qualname__} "
                                  f"both keep their checkpoint state under state_key {key!r}; override the "
                                  f"state_key property of {cls.__qualname__} to name each instance from its arguments")
        keyed[key] = cb
    return keyed
