"""``bloomtrain train`` with one injected fault: a rank SIGKILLs itself (tests/bloomtrain/test_recovery.py), freezes,
hangs in Python or is slow (tests/bloomtrain/test_hang.py).

Run under torchrun from the repository root, exactly like the real trainer (``-m tests.bloomtrain.fault_job
--config X key=value ...``): this module adds one callback to the trainer's defaults and then runs the
``bloomtrain train`` CLI unchanged. The fault comes from the environment, since torchrun owns argv:

- ``FAULT_RANK``: the global rank that dies (no fault when unset);
- ``FAULT_HOW``: how: ``kill`` (SIGKILL, the default), ``stop`` (SIGSTOP: frozen, as ``kill -STOP``) or ``sleep``
  (an hour in ``time.sleep``: stuck in Python);
- ``FAULT_AFTER``: an iteration number: the rank dies right after that iteration's checkpoint (the
  callback's priority is below the checkpoint callback's, whose save ends with a barrier once ``latest`` moved);
  ``start``: it dies as soon as the trainer resumed, on every start; ``launch``: it dies as soon as it is
  launched, before it imports torch, on every start (a rank that keeps dying, within a second);
- ``FAULT_MARKER``: a file; when given, the fault happens once: the file is created just before the kill,
  and a rank that finds it does not die again (the restarted worker group runs on);
- ``FAULT_PEERS_RECORD``: set, the other ranks of the attempt with the fault ignore SIGTERM outside the trainer's
  own handler (which only asks for a save): each records the error the death caused in its peers before it
  exits, whenever the agent sends its stop. Without it the order is chance: the trainer puts the previous
  SIGTERM action back as the error unwinds, and an agent quick to see the death then killed the peer before
  it wrote its record (it said ``running``);
- ``FAULT_LATE_S``: seconds every rank but 0 waits at launch, before it imports torch: rank 0 meets an input
  error first, so the agent's line names it (without it, which rank records the shared error first is chance);
- ``FAULT_SLOW_S``: seconds every rank sleeps after each iteration (time for a test to act mid-run);
- ``FAULT_SLOW_RANK`` and ``FAULT_SLOW_CPU_S``: that rank computes this many more CPU seconds in each step (it
  spins when the step reads its first micro-batch): a straggler that still progresses;
- ``FAULT_BUDGET_FIRST_ATTEMPT``: minutes; the first attempt of a Slurm job (``SLURM_RESTART_COUNT`` unset or
  0) gets this ``checkpoint.exit_duration_in_mins``: an allocation whose time runs out, then a requeued one
  with the job's own budget.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def die(rank: int, where: str, marker: Path | None, how: str = "kill") -> None:
    """SIGKILL (``how``: SIGSTOP, or sleep an hour) this process if it is global rank ``rank`` (and, with a marker,
    only the first time)."""
    if int(os.environ["RANK"]) != rank or (marker is not None and marker.exists()):
        return
    if marker is not None:
        marker.touch()
    if how == "sleep":
        print(f"fault_job: rank {rank} sleeps {where}", flush=True)
        time.sleep(3600)
        return
    sig = signal.SIGSTOP if how == "stop" else signal.SIGKILL
    print(f"fault_job: rank {rank} {'freezes' if how == 'stop' else 'kills'} itself {where} ({sig.name})", flush=True)
    os.kill(os.getpid(), sig)


def kill_rank_callback(rank: int, after: str, marker: Path | None, how: str = "kill"):
    """The callback that kills (freezes, puts to sleep) ``rank`` after the checkpoint of iteration ``after``, or at
    the start."""
    from bloomtrain.callbacks.base import CHECKPOINT, Callback  # noqa: PLC0415 - bloomtrain.callbacks imports torch

    class KillRank(Callback):
        priority = CHECKPOINT - 1  # after the checkpoint callback's save (its barrier: `latest` moved everywhere)

        def pre_train(self, trainer) -> None:
            if after == "start":
                die(rank, "at the start", marker, how)

        def post_step(self, trainer, step) -> None:
            if after != "start" and step.iteration == int(after):
                die(rank, f"after the checkpoint of iteration {step.iteration}", marker, how)

    return KillRank()


def slow_callback(seconds: float):
    from bloomtrain.callbacks.base import Callback  # noqa: PLC0415

    class Slow(Callback):
        def post_step(self, trainer, step) -> None:
            time.sleep(seconds)

    return Slow()


def slow_rank_callback(rank: int, cpu_s: float):
    """The callback that makes ``rank`` compute ``cpu_s`` more CPU seconds inside each step."""
    from bloomtrain.callbacks.base import Callback  # noqa: PLC0415

    def spin_first(batches):
        first = True
        for batch in batches:
            if first:
                end = time.process_time() + cpu_s
                while time.process_time() < end:
                    pass
                first = False
            yield batch

    class SlowRank(Callback):
        def pre_step(self, trainer, step) -> None:
            if int(os.environ["RANK"]) == rank:
                step.batches = spin_first(step.batches)

    return SlowRank()


def main(argv: list[str]) -> int:
    if os.environ.get("FAULT_LATE_S") and int(os.environ["RANK"]) != 0:
        time.sleep(float(os.environ["FAULT_LATE_S"]))
    fault = slow_callback(float(os.environ["FAULT_SLOW_S"])) if os.environ.get("FAULT_SLOW_S") else None
    if os.environ.get("FAULT_SLOW_RANK"):
        fault = slow_rank_callback(int(os.environ["FAULT_SLOW_RANK"]), float(os.environ["FAULT_SLOW_CPU_S"]))
    if "FAULT_RANK" in os.environ:
        rank, after = int(os.environ["FAULT_RANK"]), os.environ["FAULT_AFTER"]
        marker = Path(os.environ["FAULT_MARKER"]) if os.environ.get("FAULT_MARKER") else None
        if after == "launch":
            die(rank, "at launch", marker)  # before any import of torch: a second per death
        else:
            fault = kill_rank_callback(rank, after, marker, os.environ.get("FAULT_HOW", "kill"))
        fault_ahead = marker is None or not marker.exists()
        if os.environ.get("FAULT_PEERS_RECORD") and fault_ahead and int(os.environ["RANK"]) != rank:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
    budget = os.environ.get("FAULT_BUDGET_FIRST_ATTEMPT")
    if budget and os.environ.get("SLURM_RESTART_COUNT", "0") == "0":
        argv = [*argv, f"checkpoint.exit_duration_in_mins={budget}"]  # the last override wins
    import bloomtrain.train  # noqa: PLC0415
    from bloomtrain.cli import main as bloomtrain_main  # noqa: PLC0415

    if fault is not None:
        defaults = bloomtrain.train.default_callbacks
        bloomtrain.train.default_callbacks = lambda *args, **kwargs: [*defaults(*args, **kwargs), fault]
    return bloomtrain_main(["train", *argv])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
