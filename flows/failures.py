"""How the flows end on a user error: a Failed state whose message is the error's one line, no traceback.

A ``BloomstackError`` is the user's to fix (a missing corpus, a bad value), and says how in one line; the CLIs
print it and exit 2, and the flows end Failed with that line as the state's message, so the UI and a
``run_deployment`` caller read the fix directly. Any other exception is a bug: it is not caught here, and
Prefect keeps its traceback in the run's logs and state.

- ``user_errors``: the decorator under ``@flow`` of every flow (one place, not a try/except per flow).
- ``transient``: the ``retry_condition_fn`` of tasks with retries: a user error is not retried, since the
  same input fails the same way (retries are for a worker lost or a file system hiccup).
- ``FlowEnded``: raised where a flow decides it cannot complete (a failed or cancelled training launch) with
  the state to end in; ``user_errors`` returns that state, so a flow's own code only returns its result.
- ``stage_result``: the pipeline's view of a stage it ran as a subflow (``return_state=True``): its typed
  result, or ``StageEnded`` naming the stage, which ``user_errors`` on the pipeline turns into the pipeline's
  own final state, "<stage> stage Failed: <the stage's one line>". A stage that failed on a bug re-raises it
  with its traceback instead.

The trade-off: Prefect's task engine still logs a failed task's traceback (a user error raised inside a task
reaches the flow through it); the state message, which is what people read first, is the one line.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

from prefect import get_run_logger
from prefect.states import Cancelled, Failed, State

from bloomdata.errors import BloomstackError

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class FlowEnded(BloomstackError):
    """End the flow run in ``state`` (Failed or Cancelled, with its message) instead of returning a result."""

    def __init__(self, state: State[Any]):
        self.state = state
        super().__init__(state.message or state.name or "")


class StageEnded(FlowEnded):
    """A pipeline stage ended without completing (a user error, a failed launch, a cancel): the pipeline ends
    in the same kind of state, its message naming the stage."""

    def __init__(self, stage: str, state: State[Any]):
        self.stage = stage
        end = Cancelled if state.is_cancelled() else Failed
        super().__init__(end(message=f"{stage} stage {state.name}: {state.message}"))


def user_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a flow's function (under ``@flow``): a ``BloomstackError`` ends the run Failed with its one line
    as the message, a ``FlowEnded`` in its state (Cancelled for a cancelled pipeline stage); everything else
    propagates. Typed as returning ``R``: a caller that gets a state asked for one (``return_state=True``)."""

    @functools.wraps(fn)  # keeps the signature, name and module: Prefect's parameter schema and entrypoint
    def run(*args: P.args, **kwargs: P.kwargs) -> Any:
        try:
            return fn(*args, **kwargs)
        except StageEnded as exc:
            get_run_logger().error("%s; earlier stages are kept and a rerun resumes there", exc)
            return exc.state
        except FlowEnded as exc:
            get_run_logger().error("%s", exc)
            return exc.state
        except BloomstackError as exc:
            get_run_logger().error("%s", exc)
            return Failed(message=str(exc))

    # Prefect validates parameters against the signature, resolving string annotations (``from __future__ import
    # annotations``) in the *wrapper's* module: give it the flow's signature with its types already resolved.
    run.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return cast(Callable[P, R], run)


def transient(task: Any, task_run: Any, state: State[Any]) -> bool:
    """``retry_condition_fn``: retry a failed task unless it failed on a user error."""
    return not isinstance(state.data, BloomstackError)


def stage_result(stage: str, state: State[Any], result_type: type[T]) -> T:
    """The result of a stage's subflow run, checked to be a ``result_type``; ``StageEnded`` when it did not
    complete. A stage that raised something other than a ``BloomstackError`` (a bug) re-raises it here,
    traceback and all."""
    if state.is_completed():
        result = state.result()
        if not isinstance(result, result_type):
            raise TypeError(f"{stage} stage returned {type(result).__name__}, not {result_type.__name__}")
        return result
    if state.is_failed():
        error = state.result(raise_on_failure=False)
        if isinstance(error, BaseException) and not isinstance(error, BloomstackError):
            raise error
    raise StageEnded(stage, state)


def ended_unfinished(prog: str, state: State[Any], what: str = "the run") -> bool:
    """For a command's ``main``: when the flow run did not complete, say how it ended and what to do on stderr
    (two lines) and return True (the command then exits 1)."""
    if state.is_completed():
        return False
    print(f"{prog}: {what} ended {state.name}: {state.message}", file=sys.stderr)
    print(f"{prog}: fix the cause and run the same command again: finished stages are skipped", file=sys.stderr)
    return True
