"""DeepSpeed's own checkpoint files, written through bloomdata.durable.

DeepSpeed writes its files (layer files, ``mp_rank_*`` engine state, optimizer shards) through the
engine's ``checkpoint_engine`` (deepspeed/runtime/checkpoint_engine/checkpoint_engine.py: ``create``,
``save``, ``load``, ``commit``). Its default, ``TorchCheckpointEngine``, calls ``torch.save`` on the final
path with no fsync, so a crash can leave a torn file under its real name, and a power cut can lose files
that ``latest`` already names. ``DurableCheckpointEngine`` is the same engine with each file written
atomically and fsynced (bloomdata.durable.write_with): once ``save`` returns, the file is whole and on
disk, and ``commit`` has nothing left to flush. Its ``load`` reads with ``weights_only=True`` (safe_load:
a file that would run code is refused in one line). It also records the files this rank wrote for the current
tag and calls ``after_file(path)`` after each one (fault-injection tests kill the process there). ``write`` is the
writer of the save under way (a ``SaveLedger``'s, which records each file's digest: bloomtrain.checkpoint.manifest).
An asynchronous save sets ``host_copy`` (``HostCopier.copy``: bloomtrain.checkpoint.host_copy) and a ``write`` that
only keeps each file's fill for later (``background.DeferredFiles``): each state DeepSpeed hands over is copied to
host memory at once, and ``torch.save`` of that copy, which writes the same bytes, runs in the background.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from deepspeed.runtime.checkpoint_engine.checkpoint_engine import CheckpointCommitInfo, CheckpointEngine
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

from bloomdata import durable
from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import safe_load


class DurableCheckpointEngine(CheckpointEngine):
    def __init__(self, zipfile_serialization: bool) -> None:
        super().__init__()
        self.name = "bloomtrain.DurableCheckpointEngine"
        self.zipfile_serialization = zipfile_serialization  # the format DeepSpeed's config asked for
        self.written: list[str] = []
        """Files this rank wrote since the last ``create`` (one checkpoint tag)."""
        self.after_file: Callable[[str], None] | None = None
        self.write: durable.Writer = durable.write_with
        self.host_copy: Callable[[Any], Any] | None = None

    def create(self, info: CheckpointCommitInfo) -> None:
        self.written = []

    def save(self, state_dict, path: str) -> None:
        if self.host_copy is not None:
            state_dict = self.host_copy(state_dict)  # training may change the live tensors once this returns
        self.write(path, lambda f: torch.save(state_dict, f, _use_new_zipfile_serialization=self.zipfile_serialization))
        self.written.append(path)
        if self.after_file is not None:
            self.after_file(path)

    def load(self, path: str, map_location=None):
        return safe_load.load(path, map_location)

    def commit(self, info: CheckpointCommitInfo) -> bool:
        return True  # every file was fsynced as it was written


def install(engine) -> DurableCheckpointEngine:
    """Replace the engine's checkpoint engine by the durable one (same serialization); returns it."""
    current = engine.checkpoint_engine
    if isinstance(current, DurableCheckpointEngine):
        return current
    if type(current) is not TorchCheckpointEngine:
        # The fast/decoupled/DataStates writers need their own commit protocol; bloomtrain never enables them.
        raise BloomstackError(f"DeepSpeed's checkpoint engine is {type(current).__name__}; bloomtrain writes "
                              "checkpoints through torch.save only: remove checkpoint.writer/datastates from the "
                              "DeepSpeed config")
    durable_engine = DurableCheckpointEngine(current.zipfile_serialization)
    engine.checkpoint_engine = durable_engine
    return durable_engine
