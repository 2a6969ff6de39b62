"""Stop requests: exit signals, a kill-switch file and a wall-clock budget, agreed on by all ranks.

A signal handler only sets a flag: the iteration in flight finishes, then every rank learns of the request
through one all-reduce (MAX of three flags) per iteration, and the run saves and exits 0 together. A signal
or a file system view can reach the ranks at different iterations; agreeing at one point per iteration
makes all of them stop after the same one.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import psutil
import torch
import torch.distributed as dist

from bloomtrain.callbacks.base import STOP_REQUESTS, Callback, Step, TrainerView
from bloomtrain.config import CheckpointConfig
from bloomtrain.exit_record import ExitKind


def launch_time() -> float:
    """When this run was launched (Unix time): this process's start, or under torchrun its agent's (our
    parent's), so that a worker group torchrun restarted does not get a fresh time budget and outlive the
    job's time limit without a save."""
    me = psutil.Process()
    parent = me.parent() if "TORCHELASTIC_RESTART_COUNT" in os.environ else None
    return (parent or me).create_time()


class StopRequests:
    """Signals, a kill-switch file and a wall-clock budget, agreed on by all ranks once per iteration."""

    def __init__(self, cfg: CheckpointConfig) -> None:
        self.cfg = cfg
        # Megatron counts exit_duration_in_mins from launch, so start-up and checkpoint loading count too.
        self.start = launch_time()
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for name in self.cfg.exit_signals:
            signum = getattr(signal, name)
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        # Only set a flag: the iteration finishes, then every rank saves together.
        self.received = signal.Signals(signum).name

    def check(self) -> tuple[ExitKind, str] | None:
        """Collective: (exit record kind, reason) to stop for (signal / kill switch / time limit) if any rank has
        one."""
        local = [
            self.received is not None,
            self.cfg.kill_switch_path is not None and os.path.exists(self.cfg.kill_switch_path),
            self.cfg.exit_duration_in_mins is not None
            and (time.time() - self.start) / 60.0 >= self.cfg.exit_duration_in_mins,
        ]
        several = dist.is_initialized() and dist.get_world_size() > 1
        # NCCL reduces device tensors only: the flags then go to the device and back, a host sync per iteration
        # (microseconds: the step's loss read has already emptied the device's queue). One rank: none at all.
        device = f"cuda:{torch.cuda.current_device()}" if several and dist.get_backend() == "nccl" else "cpu"
        flags = torch.tensor(local, dtype=torch.int32, device=device)
        if several:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        reasons = [(ExitKind.SIGNAL, "signal " + (self.received or "(on another rank)")),
                   (ExitKind.KILL_SWITCH, f"kill switch {self.cfg.kill_switch_path}"),
                   (ExitKind.TIME_BUDGET, f"exit_duration_in_mins={self.cfg.exit_duration_in_mins}")]
        hit = [r for r, f in zip(reasons, flags.tolist()) if f]
        return hit[0] if hit else None


class StopRequestsCallback(Callback):
    """Installs the signal handlers for the run, and requests a stop after the iteration that saw one."""

    priority = STOP_REQUESTS

    def __init__(self, cfg: CheckpointConfig) -> None:
        self.requests = StopRequests(cfg)

    def pre_train(self, trainer: TrainerView) -> None:
        self.requests.install()

    def post_step(self, trainer: TrainerView, step: Step) -> None:
        hit = self.requests.check()
        if hit:
            kind, reason = hit
            trainer.request_stop(reason, kind)

    def close(self, trainer: TrainerView) -> None:
        self.requests.uninstall()
