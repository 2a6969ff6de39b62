"""The training stage's record of restarts: each one, by torchrun or by the flow, and its Markdown artifact.

A run restarts in two ways (flows.launch_config): torchrun starts a new worker group inside a launch
(``launch.max_restarts``), and the flow launches the job again after a launch failed (``retries``). Both
resume from the checkpoint ``latest`` named at that moment. Each restart is one ``Restart``: when, by whom,
why (exit code or signal, torchrun's root cause, the job's last lines) and the checkpoint it resumed from.
Prefect-free; flows.train publishes the list as the ``training-restarts`` artifact and in its summary.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from flows.launch import STARTED_OVER, LaunchResult, WorkerFailure, failure_excerpt


@dataclass
class Restart:
    at: float
    """Unix time the failure was seen."""
    by: str
    """"torchrun" (a new worker group in the same launch) or "flow" (the job launched again)."""
    cause: str
    """What failed: the rank and exit code or signal; for a relaunch, how the launch ended."""
    resumed_from: str | None
    """The checkpoint tag the restart resumed from; STARTED_OVER without one; None when not reported."""
    last_lines: list[str] = field(default_factory=list)
    """The job's last lines before a relaunch (torchrun restarts have theirs in the run's logs)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def torchrun_restart(failure: WorkerFailure) -> Restart:
    """The restart torchrun made after a worker group failed."""
    return Restart(failure.seen_at, "torchrun", failure.describe(), failure.resumed_from)


def torchrun_restarts(result: LaunchResult) -> list[Restart]:
    """The worker groups torchrun started again during one launch (its final failure, if any, is no restart)."""
    return [torchrun_restart(f) for f in result.worker_failures[:result.torchrun_restarts]]


def relaunch(result: LaunchResult, resumed_from: str | None, lines: int = 12) -> Restart:
    """The flow's relaunch after ``result``, resuming from ``resumed_from`` (``latest`` read just before)."""
    return Restart(time.time(), "flow", result.headline(), resumed_from or STARTED_OVER,
                   failure_excerpt(result.tail, lines))


def restarts_markdown(restarts: list[Restart], note: str = "") -> str:
    """A table of every restart (when, by whom, why, resumed from), then each relaunch's last lines."""
    by_torchrun = sum(r.by == "torchrun" for r in restarts)
    out = [f"# Training restarts: {len(restarts)}", "",
           f"{by_torchrun} by torchrun (a new worker group), {len(restarts) - by_torchrun} by the flow (the job "
           f"launched again). Each resumed from the checkpoint named below. {note}".rstrip(), "",
           "| # | when | by | why | resumed from |", "|---|---|---|---|---|"]
    for i, r in enumerate(restarts, 1):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.at))
        cause = r.cause.replace("|", "\\|")
        out.append(f"| {i} | {when} | {r.by} | {cause} | {r.resumed_from or 'not reported'} |")
    for i, r in enumerate(restarts, 1):
        if r.last_lines:
            out += ["", f"## Last lines before restart {i}", "", "```", *r.last_lines, "```"]
    return "\n".join(out) + "\n"
