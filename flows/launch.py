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

What happened inside a launch (which rank failed, torchrun's restarts, where each resumed) is not read from
these lines: the trainer's exit records say it, and bloomtrain.recovery decides what comes next (flows.train).
``LaunchResult`` only says how the process ended and keeps its last lines to quote.
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

_EOF = object()


class LaunchEnd(StrEnum):
    """How ``run_process`` stopped following a job (``LaunchResult.reason``)."""

    EXITED = "exited"  # its output ended: the process (and all it forked) exited on its own
    TIMEOUT = "timeout"  # ``Watch.timeout_s`` passed; its process group was killed
    CANCELLED = "cancelled"  # ``Watch.should_stop`` said so; its process group was killed


class LaunchError(RuntimeError):
    """The job ended badly: non-zero exit, timeout or cancellation. The message quotes the last lines."""

    def __init__(self, message: str, result: LaunchResult):
        super().__init__(message)
        self.result = result


@dataclass
class LaunchResult:
    """What a launch left behind: exit code, why it stopped, and the last lines of its output."""

    cmd: list[str]
    returncode: int | None
    reason: LaunchEnd
    seconds: float
    tail: list[str] = field(default_factory=list)  # the last lines seen
    tail_lines: int = 30  # lines quoted in describe()

    @property
    def ok(self) -> bool:
        return self.reason == LaunchEnd.EXITED and self.returncode == 0

    def describe(self) -> str:
        """One paragraph for a Failed state: what ran, how it ended, and its last lines."""
        quoted = self.tail[-self.tail_lines:]
        lines = "\n".join(quoted) if quoted else "(no output)"
        return f"{self.headline()}. Last {len(quoted)} lines:\n{lines}"

    def headline(self) -> str:
        """How the launch ended, in one line: exit code or signal, or the timeout / cancel that ended it."""
        prog = " ".join(self.cmd[:3]) + (" ..." if len(self.cmd) > 3 else "")
        if self.reason == LaunchEnd.TIMEOUT:
            return f"`{prog}` timed out after {self.seconds:.0f} s; its process group was killed"
        if self.reason == LaunchEnd.CANCELLED:
            return f"`{prog}` was cancelled after {self.seconds:.0f} s; its process group was killed"
        return f"`{prog}` exited with code {self.returncode}{_signal_hint(self.returncode)}"


def _signal_hint(rc: int | None) -> str:
    if rc is None or rc >= 0:
        return " (137 = SIGKILL, often the OOM killer)" if rc == 137 else ""
    try:
        return f" (killed by {signal.Signals(-rc).name})"
    except ValueError:
        return ""


def kill_group(proc: subprocess.Popen[Any], grace_s: float = 10.0) -> None:
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


def _pump(stream: IO[str], out: queue.Queue[object]) -> None:
    for line in iter(stream.readline, ""):
        out.put(line.rstrip("\n"))
    out.put(_EOF)


@dataclass(frozen=True)
class Watch:
    """How ``run_process`` follows a job: where its lines go, when it is stopped, how long it may take."""

    on_line: Callable[[str], None] = print
    """Each output line (stdout and stderr merged), as it arrives."""
    log_file: str | Path | None = None
    """Append every line here too."""
    tail_lines: int = 30
    """Last lines kept for ``LaunchResult.describe``."""
    should_stop: Callable[[], bool] | None = None
    """Asked every ``stop_check_s`` seconds; True ends the run as CANCELLED."""
    stop_check_s: float = 2.0
    timeout_s: float | None = None
    """Wall-clock limit; past it the run ends as TIMEOUT."""
    grace_s: float = 10.0
    """SIGTERM to SIGKILL of the process group."""
    poll_s: float = 0.2
    """How often the calling thread wakes without a line (the latency of a signal or a stop)."""
    on_start: Callable[[int], None] | None = None
    """Called with the job's pid (its process group)."""
    on_interrupt: Callable[[], None] | None = None
    """Runs first when an exception (Ctrl-C, SIGTERM) stops the caller, before the group is stopped."""


def run_process(cmd: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | Path | None = None,
                watch: Watch | None = None) -> LaunchResult:
    """Run ``cmd`` in its own process group, stream its output, and always leave no process behind.

    ``env`` is merged over ``os.environ`` (plus ``PYTHONUNBUFFERED=1`` so Python ranks stream line by line);
    ``watch`` says where the lines go and when to stop. The result is returned for every ending; callers
    decide what is a failure (see ``LaunchResult.ok``).
    """
    watch = watch or Watch()
    cmd = [str(c) for c in cmd]
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    tail: collections.deque[str] = collections.deque(maxlen=watch.tail_lines)
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, errors="replace", bufsize=1, start_new_session=True,
    )
    # An append-only log, not a durable file (bloomdata.durable): each line goes out as it arrives, so a
    # killed flow keeps everything up to its last line. Closed in the finally below.
    log = open(log_file, "a", encoding="utf-8") if (log_file := watch.log_file) else None
    lines: queue.Queue[object] = queue.Queue()  # str lines, then _EOF
    reader = threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True, name=f"launch-{proc.pid}")
    reader.start()
    reason = LaunchEnd.EXITED
    interrupted = True  # until the try block completes: an exception (e.g. TerminationSignal) is on its way
    try:
        if watch.on_start is not None:
            watch.on_start(proc.pid)
        reason = _follow(proc, lines, watch, tail, log)
        if reason == LaunchEnd.EXITED:
            proc.wait()
        interrupted = False
    finally:
        # Every way out (normal end, timeout, cancel, exceptions incl. Prefect's TerminationSignal) goes here.
        if interrupted and watch.on_interrupt is not None:
            watch.on_interrupt()
        if proc.poll() is None or group_alive(proc.pid):
            why = ("interrupted: the caller is stopping" if interrupted
                   else reason if reason != LaunchEnd.EXITED else "leftovers")
            watch.on_line(f"[launch] terminating process group {proc.pid} ({why})")
            kill_group(proc, watch.grace_s)
        proc.wait()
        if log is not None:
            log.close()
    return LaunchResult(cmd, proc.returncode, reason, time.monotonic() - start, list(tail), watch.tail_lines)


def _follow(proc: subprocess.Popen[str], lines: queue.Queue[object], watch: Watch, tail: collections.deque[str],
            log: IO[str] | None) -> LaunchEnd:
    """Pass the job's lines on until its output ends (EXITED), its time is up (TIMEOUT) or ``should_stop``
    says so (CANCELLED)."""
    start = time.monotonic()
    next_check = start + watch.stop_check_s
    leader_gone = 0.0
    while True:
        try:
            item = lines.get(timeout=watch.poll_s)
        except queue.Empty:
            item = None
        if item is _EOF:
            return LaunchEnd.EXITED
        if isinstance(item, str):
            tail.append(item)
            if log is not None:
                log.write(item + "\n")
            watch.on_line(item)
        # Checked after every line too: a job that never stops printing must still be stoppable.
        now = time.monotonic()
        if item is None and proc.poll() is not None:
            # The leader exited but something it forked still holds the pipe open: stop reading
            # after a short drain; the finally of run_process kills the leftovers.
            leader_gone = leader_gone or now
            if now - leader_gone > 1.0:
                return LaunchEnd.EXITED
        if watch.timeout_s is not None and now - start > watch.timeout_s:
            return LaunchEnd.TIMEOUT
        if watch.should_stop is not None and now >= next_check:
            next_check = now + watch.stop_check_s
            if watch.should_stop():
                return LaunchEnd.CANCELLED
