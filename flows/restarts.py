"""The training stage's record of restarts: each one, by torchrun or by the flow, and its Markdown artifact.

A run restarts in two ways (flows.launch_config): torchrun starts a new worker group inside a launch
(``launch.max_restarts``; bloomtrain.launcher's agents decide), and the flow launches the job again after a
launch stopped early (``retries``; bloomtrain.recovery decides). Both resume from the checkpoint ``latest``
names at that moment. Each restart is one ``Restart``: when, by whom, why (the root cause the exit records
give: which rank, on which node, how it ended) and the checkpoint it resumed from. torchrun's are read from
the node records its agents wrote in the launch's exit directory (bloomtrain.exit_record), never from log
lines. Prefect-free; flows.train publishes the list as the ``training-restarts`` artifact and in its summary.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bloomtrain.exit_record import attempts, read_attempt
from bloomtrain.recovery import Decision

STARTED_OVER = "(none: started over)"  # where a restart resumed when there was no checkpoint yet


@dataclass
class Restart:
    at: float
    """Unix time of the decision to restart."""
    by: str
    """"torchrun" (a new worker group in the same launch) or "flow" (the job launched again)."""
    cause: str
    """What failed: the rank, its node and how it ended; for a relaunch, how the launch ended."""
    resumed_from: str | None
    """The checkpoint tag the restart resumed from; STARTED_OVER without one; None when not reported."""
    last_lines: list[str] = field(default_factory=list)
    """The job's last lines before a relaunch (torchrun restarts have theirs in the run's logs)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def torchrun_restarts(exit_dir: str | Path) -> list[Restart]:
    """The worker groups torchrun started again during one launch, from its agents' node records (one per
    restarted attempt: every node records the same decision)."""
    found = []
    for number in attempts(exit_dir):
        nodes = read_attempt(exit_dir, number).nodes.values()
        node = next((n for n in nodes if n.action == "retry"), None)
        if node is not None:
            resumed = STARTED_OVER if node.resumes_from == "" else node.resumes_from
            found.append(Restart(node.at, "torchrun", node.cause, resumed))
    return found


def relaunch(decision: Decision, last_lines: list[str]) -> Restart:
    """The flow's relaunch that ``decision`` (bloomtrain.recovery.after_launch) asked for."""
    return Restart(time.time(), "flow", decision.cause, decision.checkpoint or STARTED_OVER, last_lines)


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
