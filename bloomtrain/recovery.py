"""The one place that decides what happens after a training attempt stopped: retry, requeue or stop.

Three callers, one policy, one input: the attempt's exit records (bloomtrain.exit_record), never log lines.

- the torchrun restart hook (bloomtrain.agent), after a worker group failed: restart it on the same nodes, or
  stop (``after_worker_failure``; every node's agent gives its view, ``NodeView``, and all decide alike);
- the Slurm job (``bloomtrain slurm``'s script runs ``python -m bloomtrain.recovery`` after srun): requeue
  the job or stop (``after_launch``);
- the flows (flows.train), after a launch: relaunch or stop (``after_launch``).

The rules:

1. a config or input error, a full disk or a damaged checkpoint (policy ``never``) is never retried
   anywhere (a retry reads the same config, fills the same disk, reads the same files): stop, exit 2;
2. the end of the schedule, the kill switch or a signal: stop, exit 0 (nothing left, or a person asked);
3. the time budget: continue in a new allocation when the attempt saved a newer checkpoint;
4. a failure, or a hang (a rank saw no finished iteration for ``stability.hang_timeout_s``): torchrun restarts the
   worker group on the same nodes while restarts remain and every node answers. A lost node stops the attempt at once
   (torchrun would wait for it in the next rendezvous). After the launch: requeue when the attempt saved a newer
   checkpoint; without one, torchrun already failed ``max_restarts + 1`` times on these nodes, so stop and name them (a
   retry would likely fail the same way);
5. at most ``max_requeues`` requeues (or flow relaunches) in all.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.config_loader import derive
from bloomtrain.checkpoint.tags import read_latest
from bloomtrain.exit_record import Attempt, ExitKind, ExitRecord, attempts, read_attempt

REQUEUE_EXIT = 75  # EX_TEMPFAIL: what `python -m bloomtrain.recovery` exits with when the job should requeue


@dataclass(frozen=True)
class KindRule:
    """What an attempt whose ranks ended with one ``ExitKind`` leads to (the rules of the module docstring)."""

    policy: Literal["stop", "continue", "never", "failure"]
    """stop: ended on purpose, nothing left or a person asked (exit 0); continue: ended on purpose, continues
    in a new allocation when it saved a newer checkpoint; never: not retried anywhere (exit 2); failure:
    restarted or requeued while a newer checkpoint shows progress."""
    said: str
    """What a decision line calls it."""

    @property
    def on_purpose(self) -> bool:
        """The trainer saved and exited 0."""
        return self.policy in ("stop", "continue")


AFTER_KIND: dict[ExitKind, KindRule] = {
    ExitKind.RUNNING: KindRule("failure", "died without an exit record"),
    ExitKind.FINISHED: KindRule("stop", "training finished"),
    ExitKind.TIME_BUDGET: KindRule("continue", "the trainer stopped at its time budget"),
    ExitKind.SIGNAL: KindRule("stop", "stopped by a signal"),
    ExitKind.KILL_SWITCH: KindRule("stop", "stopped by the kill switch"),
    ExitKind.CONFIG_ERROR: KindRule("never", "config or input error"),
    ExitKind.DISK_FULL: KindRule("never", "disk full"),
    ExitKind.CORRUPT_CHECKPOINT: KindRule("never", "damaged checkpoint"),
    ExitKind.FAILURE: KindRule("failure", "failed"),
    ExitKind.HANG: KindRule("failure", "stopped making progress"),
}
if set(AFTER_KIND) != set(ExitKind):  # a new kind needs its rule here before anything can record it
    raise AssertionError(f"recovery has no rule for {sorted(set(ExitKind) - set(AFTER_KIND))}")


class Decision(BaseModel):
    action: Literal["retry", "requeue", "stop"]
    """retry: a new worker group on the same nodes (torchrun); requeue: a new launch or allocation."""
    exit_code: int = 0
    """For a stop: 0 ended on purpose, 2 config or input error, 1 failure."""
    line: str
    """What happened and what comes next, in one line."""
    cause: str = ""
    """What happened, alone (the line starts with it)."""
    checkpoint: str | None = None
    """The checkpoint tag the next attempt resumes from (None: it starts over)."""


# --- the torchrun restart hook -----------------------------------------------------------------------------


class NodeView(BaseModel):
    """One node agent's view of a failed worker group: its ranks and how each one that failed ended."""

    node: str
    ranks: list[int]
    user_error: tuple[int, ExitKind, str] | None = None
    """(rank, kind, message) of an ending a retry would meet again (policy ``never`` in ``AFTER_KIND``: a config or
    input error, a full disk, a damaged checkpoint)."""
    deaths: list[tuple[bool, int, str]] = []
    """(stopped by SIGTERM, rank, how) of ranks that died without a final record: killed by a signal, or exited
    silently. SIGTERM is what the agent sends the rest of a failed group: a consequence more likely than a cause."""
    failures: list[tuple[float, int, str]] = []
    """(time, rank, message) of ranks that recorded a failure."""
    hangs: list[tuple[int, float, int, str, str]] = []
    """(last finished iteration or -1, time, rank, message, stacks file) of ranks that recorded a hang."""
    iterations: dict[int, int] = {}
    """rank -> last finished iteration, of every rank whose final record says."""
    alive: list[tuple[int, str]] = []
    """(rank, process status: psutil's, e.g. "stopped", "running", "sleeping") of ranks that were still running when
    the group failed (or the node learned of a failure elsewhere) and wrote no final record."""
    checkpoint_dir: str | None = None


def exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}" + (" (137 = SIGKILL, often the OOM killer)" if code == 137 else "")


def node_view(node: str, ranks: list[int], exits: dict[int, int], attempt: Attempt,
              alive: dict[int, str] | None = None) -> NodeView:
    """This node's view: ``exits`` maps each of its failed global ranks to the exit code torchrun saw, ``alive``
    each of its ranks still running to its process status."""
    view = NodeView(node=node, ranks=sorted(ranks))
    for rank in sorted(ranks):
        record = attempt.ranks.get(rank)
        if record is not None and record.kind != ExitKind.RUNNING and record.iteration is not None:
            view.iterations[rank] = record.iteration
        if record is not None and record.kind == ExitKind.HANG:
            view.hangs.append((-1 if record.iteration is None else record.iteration, record.ended or 0.0, rank,
                               record.message, record.traceback or ""))
        elif alive and rank in alive and (record is None or record.kind == ExitKind.RUNNING):
            view.alive.append((rank, alive[rank]))
    for rank, code in sorted(exits.items()):
        record = attempt.ranks.get(rank)
        if record is not None and record.checkpoint_dir:
            view.checkpoint_dir = record.checkpoint_dir
        if record is not None and AFTER_KIND[record.kind].policy == "never":
            view.user_error = view.user_error or (rank, record.kind, record.message)
        elif (alive or {}).get(rank) == "stopped" and (record is None or record.kind == ExitKind.RUNNING):
            continue  # frozen when the group failed (hang_cause): its kill was the agent's
        elif record is None or record.kind == ExitKind.RUNNING:
            how = exit_text(code) + ("" if code < 0 else " without an exit record")
            view.deaths.append((code == -signal.SIGTERM, rank, how))
        elif record.kind == ExitKind.FAILURE:
            view.failures.append((record.ended or 0.0, rank, record.message))
    view.checkpoint_dir = view.checkpoint_dir or next((r.checkpoint_dir for r in attempt.ranks.values()
                                                       if r.checkpoint_dir), None)
    return view


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _where(rank: int, views: list[NodeView]) -> str:
    node = next((v.node for v in views if rank in v.ranks), None)
    return f"rank {rank}" + (f" on {node}" if node else "")


def hang_cause(views: list[NodeView]) -> str | None:
    """When a rank recorded a hang: the rank that stopped making progress, and why we think so. In order: a rank
    whose process is stopped (frozen); the rank whose last finished iteration is behind another's; a rank still
    running without a record after its peers gave up (stuck where its watchdog could not run); else the first
    rank to time out. None without a hang record."""
    hangs = sorted(h for v in views for h in v.hangs)
    if not hangs:
        return None
    alive = sorted((r, status) for v in views for r, status in v.alive)
    known = {r: it for v in views for r, it in v.iterations.items()}
    first_it, _, first, message, stacks = hangs[0]
    frozen = [r for r, status in alive if status == "stopped"]
    if frozen:
        culprit, why = frozen[0], "its process is stopped (SIGSTOP, a debugger), no exit record"
    elif known and first_it < max(known.values()):
        culprit, why = first, f"behind: its last finished iteration is {first_it}, its peers' {max(known.values())}"
    elif alive:
        culprit = alive[0][0]
        why = "still running without an exit record after its peers gave up: stuck outside Python?"
    else:
        culprit, why = first, "the first to time out"
    where = f"stacks in {Path(stacks).parent}" if stacks else "no stack file"
    return f"{_where(culprit, views)} stopped making progress ({why}); {_where(first, views)}: {message}; {where}"


def root_cause(views: list[NodeView]) -> str:
    """The first failure of the attempt: a rank that died (a kill comes before the errors it causes in its
    peers; SIGTERM last), then a hang (``hang_cause``), else the failure recorded first, as torchelastic's "first
    observed failure"."""
    deaths = sorted(d for v in views for d in v.deaths)
    if deaths and not deaths[0][0]:
        return f"{_where(deaths[0][1], views)} {deaths[0][2]}"
    hang = hang_cause(views)
    if hang is not None:
        return hang
    if deaths:
        return f"{_where(deaths[0][1], views)} {deaths[0][2]}"
    failures = sorted(f for v in views for f in v.failures)
    if failures:
        return f"{_where(failures[0][1], views)} failed: {failures[0][2]}"
    return "a rank failed"


def checkpoint_to_resume(views: list[NodeView]) -> str | None:
    """The tag ``latest`` names; "" when there is none yet; None when no rank recorded its checkpoint dir."""
    ckpt = next((v.checkpoint_dir for v in views if v.checkpoint_dir), None)
    return None if ckpt is None else read_latest(ckpt) or ""


def _from(tag: str | None) -> str:
    return tag or ("no checkpoint yet (starts over)" if tag == "" else "its latest checkpoint, if any")


def after_worker_failure(views: list[NodeView], lost: dict[str, list[int]], restarts_left: int,
                         max_restarts: int) -> Decision:
    """After a worker group failed: restart it on the same nodes, or stop. ``lost``: node -> its ranks, the
    nodes whose agent stopped answering."""
    user = next((v.user_error for v in views if v.user_error), None)
    if user is not None:
        cause = f"{_where(user[0], views)}: {AFTER_KIND[user[1]].said}"
        return Decision(action="stop", exit_code=2, cause=cause, line=f"{cause}, not retried: {user[2]}")
    tag = checkpoint_to_resume(views)
    if lost:
        cause = "lost node " + "; ".join(f"{node} ({_ranks(r)})" if r else node for node, r in sorted(lost.items()))
        return Decision(action="stop", exit_code=1, cause=cause, checkpoint=tag,
                        line=f"{cause}: its agent stopped answering, so no restart on these nodes; the next attempt "
                             f"resumes from {_from(tag)}")
    cause = root_cause(views)
    if restarts_left <= 0:
        return Decision(action="stop", exit_code=1, cause=cause, checkpoint=tag,
                        line=f"{cause}; no torchrun restart left (max_restarts={max_restarts}); the next attempt "
                             f"resumes from {_from(tag)}")
    n = max_restarts - restarts_left + 1
    return Decision(action="retry", cause=cause, checkpoint=tag,
                    line=f"{cause}; restart {n} of {max_restarts} on the same nodes, resuming from {_from(tag)}")


# --- after a launch (the Slurm job, the flows) -------------------------------------------------------------


class LaunchOutcome(BaseModel):
    """How a launch ended, as ``after_launch`` needs it (also the flags of ``python -m bloomtrain.recovery``)."""

    model_config = ConfigDict(extra="forbid")

    exit_dir: str = Field(description="the launch's exit directory (BLOOMTRAIN_EXIT_DIR)")
    returncode: int = Field(description="the launcher's exit code")
    checkpoint_dir: str | None = Field(default=None, description="checkpoint.dir (its latest file)")
    before: str | None = Field(default=None, description="the checkpoint tag `latest` named when the launch started")
    requeues: int = Field(default=0, ge=0, description="requeues (or relaunches) so far")
    max_requeues: int = Field(default=0, ge=0, description="requeues (or relaunches) allowed in all")
    again: Literal["requeue", "relaunch"] = Field(default="requeue", description="what continuing is called")
    timed_out: bool = Field(default=False, description="the caller killed the launch at its time limit")


def last_attempt(exit_dir: str | Path) -> Attempt | None:
    numbers = attempts(exit_dir) if Path(exit_dir).is_dir() else []
    return read_attempt(exit_dir, numbers[-1]) if numbers else None


def _ended_on_purpose(records: list[ExitRecord]) -> ExitKind | None:
    """The kind every rank ended with, when they agree on one that ends on purpose."""
    kinds = {r.kind for r in records}
    return kinds.pop() if len(kinds) == 1 and AFTER_KIND[next(iter(kinds))].on_purpose else None


def _failure_cause(attempt: Attempt) -> str:
    decided = [n for n in attempt.nodes.values() if n.action == "stop"]
    if decided:
        return decided[0].cause
    views = [derive(node_view(r.node, [r.rank], {}, attempt),
                    deaths=[(False, r.rank, AFTER_KIND[r.kind].said)] if r.kind == ExitKind.RUNNING else [],
                    failures=[(r.ended or 0.0, r.rank, r.message)] if r.kind == ExitKind.FAILURE else [])
             for r in attempt.ranks.values()]
    return root_cause(views)


_ED = {"requeue": "requeued", "relaunch": "relaunched"}
_ING = {"requeue": "requeuing", "relaunch": "relaunching"}
_NOUN = {"requeue": "requeues", "relaunch": "relaunches"}


def _again(out: LaunchOutcome, why: str, after: str | None) -> Decision:
    if out.requeues >= out.max_requeues:
        used = f" ({_NOUN[out.again]} are off: max 0)" if out.max_requeues == 0 else \
            f": {_ED[out.again]} {out.requeues} times already (max {out.max_requeues})"
        return Decision(action="stop", exit_code=1, cause=why, checkpoint=after,
                        line=f"{why}; not {_ED[out.again]}{used}; run it again to continue from {after}")
    return Decision(action="requeue", cause=why, checkpoint=after,
                    line=f"{why}; {_ING[out.again]} ({out.requeues + 1} of {out.max_requeues}): the next attempt "
                         f"resumes from {after}")


def after_launch(out: LaunchOutcome) -> Decision:
    """After a launch ended: requeue (relaunch) it, or stop; the exit code to stop with."""
    after = read_latest(out.checkpoint_dir) if out.checkpoint_dir else None
    if out.timed_out:
        cause = "the launch was killed at its time limit"
        return Decision(action="stop", exit_code=1, cause=cause, checkpoint=after,
                        line=f"{cause}; not {_ED[out.again]} (it would be again); latest checkpoint: {after}")
    attempt = last_attempt(out.exit_dir)
    records = list(attempt.ranks.values()) if attempt else []
    config = next((r for r in records if AFTER_KIND[r.kind].policy == "never"), None)
    if config is not None:
        cause = f"rank {config.rank} on {config.node}: {AFTER_KIND[config.kind].said}"
        return Decision(action="stop", exit_code=2, cause=cause, checkpoint=after,
                        line=f"{cause}, not {_ED[out.again]}: {config.message}")
    if not records and out.returncode == 0:  # a program that keeps no exit records: its exit code is all we have
        return Decision(action="stop", cause="the launch exited 0", checkpoint=after,
                        line=f"the launch exited 0 (no exit records); latest checkpoint: {after}")
    progress = after is not None and after != out.before
    kind = _ended_on_purpose(records) if out.returncode == 0 else None
    iteration = max((r.iteration or 0 for r in records), default=0)
    rule = AFTER_KIND[kind] if kind is not None else None
    if rule is not None and rule.policy == "continue" and progress:
        return _again(out, f"{rule.said} at iteration {iteration} and saved {after}", after)
    if rule is not None and rule.policy == "stop":
        return Decision(action="stop", cause=f"{rule.said} at iteration {iteration}", checkpoint=after,
                        line=f"{rule.said} at iteration {iteration}; latest checkpoint: {after}")
    if attempt is None:
        cause = f"the launch exited with code {out.returncode} before any rank started"
    elif rule is not None:  # continues, but saved nothing newer
        cause = f"{rule.said} without a new checkpoint (latest: {after})"
    else:
        cause = _failure_cause(attempt)
    if progress:
        return _again(out, f"training failed ({cause}) after saving {after}", after)
    return Decision(action="stop", exit_code=out.returncode or 1, cause=cause, checkpoint=after,
                    line=f"training failed ({cause}) without a new checkpoint in this attempt (latest: {after}); not "
                         f"{_ED[out.again]}: a retry would likely fail the same way")


def parser() -> ConfigParser[LaunchOutcome]:
    return ConfigParser(LaunchOutcome, "python -m bloomtrain.recovery",
                        "decide after a launch: print one line; exit 0/1/2 to stop, 75 to requeue", sources=FLAGS_ONLY)


def main(argv: list[str] | None = None) -> int:
    """For the Slurm script: one line on stdout, then exit with the decision (``REQUEUE_EXIT``: requeue)."""
    outcome, _ = parser().parse(sys.argv[1:] if argv is None else argv)
    decision = after_launch(outcome)
    print(decision.line, flush=True)
    return REQUEUE_EXIT if decision.action == "requeue" else decision.exit_code


if __name__ == "__main__":
    sys.exit(main())
