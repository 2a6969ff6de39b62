"""Launch a training job (torchrun, the DeepSpeed launcher, sbatch) as a subprocess we fully own.

Design: the child starts in its own session, hence its own process group (``start_new_session=True``),
so one ``os.killpg`` reaches the launcher *and* every rank it forked, including grandchildren that
outlive their parent. We never rely on Prefect's own cancellation to do that: a runner signals only the
flow process (3.8), and a ``.submit()``-ed task thread cannot be interrupted while it blocks on a pipe.

How it stays interruptible: a daemon thread copies the child's merged stdout/stderr into a queue; the
calling (main) thread polls that queue with a short timeout. So a SIGTERM turned into Prefect's
``TerminationSignal``, a ``SIGALRM`` timeout, a ``KeyboardInterrupt`` or a cancel request seen by
``should_stop`` all land in the main thread within ``poll_s`` and reach the ``finally`` that kills the
group: SIGTERM first (torchrun and the DeepSpeed launcher forward it to their ranks and exit), SIGKILL
after ``grace_s`` for whatever is left.

This module is Prefect-free: ``flows.train`` plugs the run logger into ``on_line`` and a flow-run-state
probe into ``should_stop``. The trade-off of the reader thread is one extra thread per launch; in
exchange every exit path, including ones we did not anticipate, goes through one cleanup.

Restarts inside a launch: torchrun (``--max-restarts``) logs one line per failed worker group, and the
trainer's rank 0 says where the next group resumed (bloomtrain.cli.train). ``run_process`` reads both from
every line, not only the tail it keeps, into ``LaunchResult.worker_failures``; ``describe`` then says how many
restarts torchrun made before it gave up, and the root-cause rank and exit code of its final report.
"""

from __future__ import annotations

import collections
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_EOF = object()


class LaunchError(RuntimeError):
    """The job ended badly: non-zero exit, timeout or cancellation. The message quotes the last lines."""

    def __init__(self, message: str, result: LaunchResult):
        super().__init__(message)
        self.result = result


# torchrun's agent, for each failed worker group: "E1124 09:04:07.408000 8273 .../torch/distributed/elastic/
# multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 8311) of binary: /usr/bin/python".
_WORKER_FAILED = re.compile(r"\] failed \(exitcode: (-?\d+)\) local_rank: (\d+) \(pid: (\d+)\)")
# bloomtrain.cli.train, rank 0 of a restarted worker group (its exact words are that module's).
STARTED_OVER = "(none: started over)"  # where a restart resumed when there was no checkpoint yet
_TRAINER_RESTART = re.compile(r"bloomtrain: torchrun restart \d+ of \d+.*?(?:resuming from (\S+)|starting over)")


@dataclass
class WorkerFailure:
    """A worker group torchrun saw fail, and where the group it started next resumed."""

    seen_at: float  # Unix time the agent's line arrived
    local_rank: int
    exitcode: int
    resumed_from: str | None = None  # the checkpoint tag; None: not reported (yet), or no checkpoint yet

    def describe(self) -> str:
        return f"local rank {self.local_rank} exited with code {self.exitcode}{_signal_hint(self.exitcode)}"


def watch_torchrun(line: str, failures: list[WorkerFailure]) -> None:
    """Record a torchrun worker-group failure, or where the restarted group resumed, from one output line."""
    if m := _WORKER_FAILED.search(line):
        failures.append(WorkerFailure(time.time(), int(m.group(2)), int(m.group(1))))
    elif failures and (m := _TRAINER_RESTART.search(line)):
        failures[-1].resumed_from = m.group(1) or STARTED_OVER


@dataclass
class LaunchResult:
    """What a launch left behind: exit code, why it stopped, and the last lines of its output."""

    cmd: list[str]
    returncode: int | None
    reason: str  # "exited" | "timeout" | "cancelled"
    seconds: float
    tail: list[str] = field(default_factory=list)  # the last lines seen (a few times tail_lines, see below)
    tail_lines: int = 30  # lines quoted in describe()
    worker_failures: list[WorkerFailure] = field(default_factory=list)  # every one torchrun logged

    @property
    def torchrun_gave_up(self) -> bool:
        """torchrun ended with its failure report (its restarts, if any, were used up)."""
        return _torchrun_report(self.tail)

    @property
    def torchrun_restarts(self) -> int:
        """Worker groups torchrun started again after a failure, in this launch."""
        return len(self.worker_failures) - (1 if self.torchrun_gave_up and self.worker_failures else 0)

    @property
    def root_cause(self) -> tuple[int, int] | None:
        """(global rank, exit code) of the first failure in torchrun's final report; None without one."""
        if not self.torchrun_gave_up:
            return None
        root = _root_cause_at(self.tail)
        block = "\n".join(self.tail[root:]) if root is not None else ""
        rank, code = re.search(r"rank\s*:\s*(\d+)", block), re.search(r"exitcode\s*:\s*(-?\d+)", block)
        return (int(rank.group(1)), int(code.group(1))) if rank and code else None

    @property
    def job_exitcode(self) -> int | None:
        """The failing program's own exit code: under torchrun the root-cause rank's, else the leader's."""
        root = self.root_cause
        return root[1] if root is not None else self.returncode

    @property
    def ok(self) -> bool:
        return self.reason == "exited" and self.returncode == 0

    def describe(self) -> str:
        """One paragraph for a Failed state: what ran, how it ended, and its last lines."""
        quoted = failure_excerpt(self.tail, self.tail_lines)
        lines = "\n".join(quoted) if quoted else "(no output)"
        return f"{self.headline()}. Last {len(quoted)} lines:\n{lines}"

    def headline(self) -> str:
        """How the launch ended, in one line: exit code or signal, torchrun's restarts and root cause."""
        prog = " ".join(self.cmd[:3]) + (" ..." if len(self.cmd) > 3 else "")
        if self.reason == "timeout":
            head = f"`{prog}` timed out after {self.seconds:.0f} s; its process group was killed"
        elif self.reason == "cancelled":
            head = f"`{prog}` was cancelled after {self.seconds:.0f} s; its process group was killed"
        else:
            head = f"`{prog}` exited with code {self.returncode}{_signal_hint(self.returncode)}"
        if self.worker_failures:
            n = self.torchrun_restarts
            head += f" after {n} torchrun restart{'s' if n != 1 else ''}"
        if (root := self.root_cause) is not None:
            head += f"; root cause: rank {root[0]} exited with code {root[1]}{_signal_hint(root[1])}"
        return head


# torchrun's agent logs like "E1122 03:46:27.979000 12376 torch/distributed/elastic/...": its report follows.
_ELASTIC_LOG = re.compile(r"^[EWI]\d{4} [\d:.]+ \d+ \S*torch/distributed/elastic/")


def _torchrun_report(lines: list[str]) -> bool:
    """torchrun's final failure report is among ``lines`` (it raises ChildFailedError when it gives up)."""
    return any("ChildFailedError" in line for line in lines)


def _root_cause_at(lines: list[str]) -> int | None:
    """Where the report's "Root Cause" block starts in ``lines``."""
    return next((i for i, line in enumerate(lines) if line.startswith("Root Cause")), None)


def failure_excerpt(lines: list[str], n: int) -> list[str]:
    """The last ``n`` lines worth quoting. Under torchrun, the ranks' own last lines (the agent's traceback
    and report come after them and would crowd them out) plus the agent's root-cause rank and exit code.
    The ranks' lines end where the agent's final run of log lines starts: after a restart, earlier agent
    lines sit among the ranks' output of the failed groups."""
    if not _torchrun_report(lines):
        return lines[-n:]
    agent = [i for i, line in enumerate(lines) if _ELASTIC_LOG.match(line)]
    first_agent = agent[-1] if agent else len(lines)
    while first_agent - 1 in agent:
        first_agent -= 1
    ranks = lines[:first_agent][-n:]
    root = _root_cause_at(lines)
    cause = [line.strip() for line in lines[root:] if line.strip().startswith(("rank", "exitcode"))] if root else []
    return ranks + ([f"[torchrun root cause] {' | '.join(cause)}"] if cause else [])


def _signal_hint(rc: int | None) -> str:
    if rc is None or rc >= 0:
        return " (137 = SIGKILL, often the OOM killer)" if rc == 137 else ""
    try:
        return f" (killed by {signal.Signals(-rc).name})"
    except ValueError:
        return ""


def kill_group(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM the child's whole process group, wait up to ``grace_s``, then SIGKILL what is left.

    We signal the group even after the leader exited: grandchildren it left behind keep the group alive.
    """
    pgid = proc.pid  # start_new_session=True: the child leads a group whose id is its pid
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(pgid):
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    # Members of a killed group are reaped by init; give the kernel a moment to drop them.
    deadline = time.monotonic() + 5.0
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def group_alive(pgid: int) -> bool:
    """True while any process (zombies excluded) is still in group ``pgid``."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) succeeds for zombies too; look at /proc so an unreaped child does not count as alive.
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _pump(stream, out: queue.Queue) -> None:
    for line in iter(stream.readline, ""):
        out.put(line.rstrip("\n"))
    out.put(_EOF)


def run_process(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | Path | None = None,
    on_line: Callable[[str], None] = print,
    should_stop: Callable[[], bool] | None = None,
    stop_check_s: float = 2.0,
    timeout_s: float | None = None,
    grace_s: float = 10.0,
    tail_lines: int = 30,
    log_file: str | Path | None = None,
    on_start: Callable[[int], None] | None = None,
    poll_s: float = 0.2,
    failures: list[WorkerFailure] | None = None,
) -> LaunchResult:
    """Run ``cmd`` in its own process group, stream its output, and always leave no process behind.

    ``env`` is merged over ``os.environ`` (plus ``PYTHONUNBUFFERED=1`` so Python ranks stream line by line).
    ``should_stop`` is asked every ``stop_check_s`` seconds; True ends the run as "cancelled". The result
    is returned for every ending; callers decide what is a failure (see ``LaunchResult.ok``). Every line is
    also read for torchrun's worker-group failures (``watch_torchrun``), into ``failures`` when given (the
    caller can then follow them while the job runs).
    """
    cmd = [str(c) for c in cmd]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    # Keep more than we quote: a launcher's own report can follow the ranks' last words (failure_excerpt).
    tail: collections.deque[str] = collections.deque(maxlen=max(200, 5 * tail_lines))
    failures = [] if failures is None else failures
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, errors="replace", bufsize=1, start_new_session=True,
    )
    # An append-only log, not a durable file (bloomdata.durable): each line goes out as it arrives, so a
    # killed flow keeps everything up to its last line. Closed in the finally below.
    log = open(log_file, "a", encoding="utf-8") if log_file else None
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True, name=f"launch-{proc.pid}")
    reader.start()
    reason = "exited"
    interrupted = True  # until the try block completes: an exception (e.g. TerminationSignal) is on its way
    try:
        if on_start is not None:
            on_start(proc.pid)
        next_check = start + stop_check_s
        eof = False
        leader_gone = 0.0
        while not eof:
            try:
                item = lines.get(timeout=poll_s)
            except queue.Empty:
                item = None
            if item is _EOF:
                eof = True
            elif item is not None:
                tail.append(item)
                watch_torchrun(item, failures)
                if log is not None:
                    log.write(item + "\n")
                on_line(item)
            # Checked after every line too: a job that never stops printing must still be stoppable.
            now = time.monotonic()
            if item is None and proc.poll() is not None:
                # The leader exited but something it forked still holds the pipe open: stop reading
                # after a short drain; the finally below kills the leftovers.
                leader_gone = leader_gone or now
                if now - leader_gone > 1.0:
                    break
            if timeout_s is not None and now - start > timeout_s:
                reason = "timeout"
                break
            if should_stop is not None and now >= next_check:
                next_check = now + stop_check_s
                if should_stop():
                    reason = "cancelled"
                    break
        if reason == "exited":
            proc.wait()
        interrupted = False
    finally:
        # Every way out (normal end, timeout, cancel, exceptions incl. Prefect's TerminationSignal) goes here.
        if proc.poll() is None or group_alive(proc.pid):
            why = "interrupted: the caller is stopping" if interrupted else reason if reason != "exited" else "leftovers"
            on_line(f"[launch] terminating process group {proc.pid} ({why})")
            kill_group(proc, grace_s)
        proc.wait()
        if log is not None:
            log.close()
    return LaunchResult(cmd, proc.returncode, reason, time.monotonic() - start, list(tail), tail_lines, failures)
