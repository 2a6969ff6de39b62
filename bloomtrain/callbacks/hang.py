"""The hang watchdog: a rank that finishes no iteration for ``stability.hang_timeout_s`` says where it is stuck
and exits, so that the launcher restarts the run from its last checkpoint instead of idling in a collective.

A daemon thread in every rank watches the time since the last finished iteration (this callback's
``post_step``, after every other hook of the iteration but the exit record's: evaluations and the checkpoint
save are part of the iteration). Past the allowance, the thread writes every thread's Python stack (and, on
CUDA, the NCCL flight recorder's trace) beside the rank's exit record, ends the record with ``hang``
(bloomtrain.exit_record.Recorder.hung) and leaves with ``os._exit(1)``: the main thread is stuck, so nothing
else could end the process. Recovery (bloomtrain.recovery) treats a hang as a failure: restart from ``latest``.
An asynchronous checkpoint's background write counts as progress while it writes files (``Saves.progress_at``):
a save that waits for the previous one's long write, or the end of the run that waits for the last, is not a hang.

The allowance, in seconds (``Allowance``): with ``hang_timeout_s: auto``, ``hang_floor_s`` or ``HANG_FACTOR`` x
the longest iteration measured in this launch, whichever is longer; with a number, that number. The first
iteration of a launch (compilation, warm-up) gets at least ``HANG_FACTOR`` x the start-up (process start to the
first iteration: imports, engine, checkpoint load) in both cases, and with auto the second 5 x the first.

Collective timeouts follow: every process group's timeout (gloo and NCCL; bloomtrain.parallel.timeouts, but for the
groups that work beside the loop, a background checkpoint's commit) is the allowance plus ``margin_s``, set when the
loop starts and whenever the allowance changes, so that a rank blocked in a collective on a frozen peer is ended by its
watchdog (with its stack and record), never by a collective timeout first. Before the loop (start-up, checkpoint load)
the launcher's default timeout holds.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from typing import Literal

import psutil

from bloomtrain.callbacks.base import HANG, Callback, Saves, Step, TrainerView
from bloomtrain.config import StabilityConfig
from bloomtrain.exit_record import Recorder
from bloomtrain.parallel.timeouts import set_collective_timeout

HANG_FACTOR = 5.0  # auto: the allowance is this many times the longest iteration measured


def margin_s(allowance: float) -> float:
    """How much longer than the watchdog's allowance a collective may block (the watchdog must end it first)."""
    return max(5.0, 0.1 * allowance)


class Allowance:
    """How long a rank may go without a finished iteration (module docstring)."""

    def __init__(self, setting: float | Literal["auto"], floor_s: float, startup_s: float) -> None:
        self.setting, self.floor_s, self.startup_s = setting, floor_s, startup_s
        self.first_s = self.longest_s = 0.0
        self.finished = 0

    def measured(self, seconds: float) -> None:
        """An iteration finished, ``seconds`` after the previous one (the first: after the start of the loop)."""
        if self.finished:
            self.longest_s = max(self.longest_s, seconds)
        else:
            self.first_s = seconds
        self.finished += 1

    @property
    def seconds(self) -> float:
        """The first iteration: 5 x the start-up; the second: 5 x the first (warm-up included); from then on 5 x the
        longest iteration since the first. Iterations end together on every rank (each one holds collectives),
        so ranks measure the same and a rank that stopped first times out first."""
        base = self.floor_s if self.setting == "auto" else float(self.setting)
        if not self.finished:
            return max(base, HANG_FACTOR * self.startup_s)
        if self.setting != "auto":
            return base
        return max(base, HANG_FACTOR * (self.first_s if self.finished == 1 else self.longest_s))

    def describe(self) -> str:
        if self.setting != "auto":
            return f"stability.hang_timeout_s={float(self.setting):g}"
        return f"stability.hang_timeout_s=auto: {self.seconds:.1f} s"


def stacks_text(header: str) -> str:
    """``header``, then every thread's Python stack (most recent call last), the main thread first."""
    threads = {t.ident: t for t in threading.enumerate()}
    main = threading.main_thread().ident
    out = [header, ""]
    for ident, frame in sorted(sys._current_frames().items(), key=lambda item: item[0] != main):
        thread = threads.get(ident)
        name = thread.name if thread is not None else "?"
        out.append(f"Thread {name} ({ident}{', daemon' if thread is not None and thread.daemon else ''}), most "
                   "recent call last:")
        out.append("".join(traceback.format_stack(frame)))
    return "\n".join(out)


def nccl_trace() -> str | None:
    """The NCCL flight recorder's trace (JSON) of this process's collectives, on CUDA when torch has it (it
    records when TORCH_FR_BUFFER_SIZE > 0: bloomtrain.train sets it); None otherwise."""
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        return None
    try:
        from torch._C import _distributed_c10d  # noqa: PLC0415

        trace = getattr(_distributed_c10d, "_dump_fr_trace_json")(True, False)  # noqa: B009 - not in torch's stubs
    except Exception as exc:  # noqa: BLE001 - a diagnostic: the record and stacks matter more
        return f'{{"error": "{type(exc).__name__}: {str(exc)[:200]}"}}'
    return trace.decode() if isinstance(trace, bytes) else str(trace)


class HangCallback(Callback):
    """The watchdog thread of this rank (module docstring)."""

    priority = HANG

    def __init__(self, cfg: StabilityConfig, recorder: Recorder) -> None:
        assert cfg.hang_timeout_s is not None  # hang_callbacks: off without one
        self.setting, self.floor_s, self.recorder = cfg.hang_timeout_s, cfg.hang_floor_s, recorder
        self.allowance = Allowance(self.setting, self.floor_s, 0.0)
        self.iteration = 0
        self.last = time.monotonic()
        self.limit = self.allowance.seconds
        self._collective_s = 0.0
        self.saves: Saves | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def pre_train(self, trainer: TrainerView) -> None:
        startup_s = max(0.0, time.time() - psutil.Process().create_time())
        self.allowance = Allowance(self.setting, self.floor_s, startup_s)
        self.iteration, self.last, self.saves = trainer.pos.iteration, time.monotonic(), trainer.checkpointer
        self._follow()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="bloomtrain-hang-watchdog")
        self._thread.start()

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        now = time.monotonic()
        self.allowance.measured(now - self.last)
        self.iteration, self.last = step.iteration, now
        self._follow()

    def _follow(self) -> None:
        """The limit the thread reads, and the collective timeouts when it changed by more than 10%."""
        self.limit = self.allowance.seconds
        wanted = self.limit + margin_s(self.limit)
        if abs(wanted - self._collective_s) > 0.1 * self._collective_s:
            set_collective_timeout(wanted)
            self._collective_s = wanted

    def on_error(self, trainer: TrainerView, error: BaseException) -> None:
        self._stop.set()  # the error is recorded by the process around the trainer

    def close(self, trainer: TrainerView) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def overdue(self, now: float) -> bool:
        """Whether the allowance has passed since the last progress: a finished iteration, or a file written by the
        background save not yet waited for (a write stuck in its commit stops progressing too)."""
        since = self.last
        background = self.saves.progress_at if self.saves is not None else None
        if background is not None:
            since = max(since, background)
        return now - since > self.limit

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, max(0.05, self.limit / 50))):
            now = time.monotonic()
            if self.overdue(now) and not self._stop.is_set():
                self._fire(now - self.last)

    def _fire(self, waited_s: float) -> None:
        record = self.recorder.record
        after = f"after iteration {self.iteration}" if self.iteration else "since the loop started"
        message = f"no finished iteration for {waited_s:.1f} s {after} ({self.allowance.describe()})"
        header = (f"bloomtrain: rank {record.rank} on {record.node} (pid {os.getpid()}): {message}.\n"
                  "Every thread's Python stack, most recent call last; the main thread (first) runs the training loop.")
        stacks = stacks_text(header)
        path = self.recorder.hung(message, stacks, nccl_trace())
        if path is None:
            print(stacks, file=sys.stderr)
        if not self.recorder.quiet:
            print(f"bloomtrain: rank {record.rank}: {message}; every thread's stack in {path or 'stderr'}",
                  file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def hang_callbacks(cfg: StabilityConfig, recorder: Recorder) -> list[Callback]:
    """The watchdog of this rank, unless ``stability.hang_timeout_s`` is null."""
    return [] if cfg.hang_timeout_s is None else [HangCallback(cfg, recorder)]
