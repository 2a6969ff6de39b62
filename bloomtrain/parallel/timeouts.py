"""Collective timeouts: the training loop's process groups follow the hang watchdog (bloomtrain.callbacks.hang);
groups that work beside the loop (a background checkpoint's commit: bloomtrain.checkpoint.checkpointer) keep the
launcher's, since their collectives may wait for a long write while the loop goes on."""

from __future__ import annotations

import warnings
from datetime import timedelta
from typing import Any

import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

BACKGROUND = "bloomtrain-background"  # the group_desc of the groups whose timeout stays the launcher's


def background_group() -> Any:
    """Collective: a gloo group of every rank for work beside the training loop (its timeout is not the loop's)."""
    return dist.new_group(backend="gloo", group_desc=BACKGROUND)


def set_collective_timeout(seconds: float) -> None:
    """The timeout of every process group of this process (gloo, NCCL) but the background ones: a collective
    blocked longer fails."""
    if not dist.is_initialized():
        return
    timeout = timedelta(seconds=seconds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a group of another backend: "only supported for either nccl or gloo"
        for group in list(c10d._world.pg_map):
            if getattr(group, "group_desc", "") == BACKGROUND:
                continue
            try:
                c10d._set_pg_timeout(timeout, group)
            except (ValueError, RuntimeError, AssertionError):
                continue  # not a member, or a backend without a settable timeout
