"""``Checkpointer``: the collective save and resume of a training run; the only mover of ``latest``.

A save, on every rank, in this order::

    rank 0 removes a leftover <tag>/ of a crashed save; barrier
    DeepSpeed's engine files          layer files, mp_rank_*, optimizer shards (TrainModule.save: atomic, fsynced)
    rng/rank_RRRRR.pt                 this rank's RNG state (atomic, fsynced)
    bloomtrain_model.json, bloomtrain_layout.json     rank 0 only (atomic, fsynced; the model json also
                                      records the fused-kernel self-check and the training record)
    barrier                           every rank's files are on disk
    rank 0: commit_tag -> latest      atomic, fsynced; then prune old tags
    barrier

So ``latest`` always names a checkpoint whose every file is whole and durable: a crash (SIGKILL, node
loss, power cut) at any point leaves ``latest`` at the previous complete tag, and the half-written
directory is removed when that tag is saved again. ``faults(point, tag)``, when given, is called at
``SAVE_POINTS`` (tests kill the process there to check exactly this).

The trainer's own position (iteration, consumed and scheduled samples, skip counters) travels in
DeepSpeed's ``client_state``, beside Megatron-DeepSpeed's keys (megatron.py) that BLOOM-era tools read; the
schedules are functions of it, so they need no state of their own. A load reads every file with
``weights_only=True`` (safe_load), and resumes a checkpoint written by Megatron-DeepSpeed (its keys only) too.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import megatron, safe_load
from bloomtrain.checkpoint.format import save_metadata
from bloomtrain.checkpoint.rng import load_rng, save_rng, seed_everything, set_rng_state
from bloomtrain.checkpoint.tags import commit_tag, prune, read_latest, tag_for
from bloomtrain.checkpoint.universal import check_same_layout, ensure_universal, save_layout
from bloomtrain.config import TrainConfig
from bloomtrain.kernels import selfcheck_report
from bloomtrain.parallel.pipeline import universal_checkpoint_info
from bloomtrain.parallel.state import ParallelState
from bloomtrain.provenance import TRAINING_KEY, training_record
from bloomtrain.train_module import TrainModule

SAVE_POINTS = ("engine_file", "after_metadata", "before_latest")
"""Where a save calls its fault hook: after each file DeepSpeed's engine writes; after this rank's RNG
and (rank 0) metadata files; after the barrier, before rank 0 moves ``latest``."""

FaultHook = Callable[[str, str], None]
"""``faults(point, tag)``: called at each of SAVE_POINTS during the save of ``tag`` (tests only)."""

CALLBACKS_KEY = "bloomtrain_callbacks"
"""The client-state key of the callbacks' states (``Callback.state_dict`` by ``state_key``)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resumed:
    """What a resume hands the trainer: its position and its callbacks' states."""

    position: dict[str, Any]
    callbacks: dict[str, dict[str, Any]]


class Checkpointer:
    """Save and resume a TrainModule's engine plus the trainer position; all methods are collective."""

    def __init__(self, cfg: TrainConfig, module: TrainModule, state: ParallelState, *, universal: bool = False,
                 faults: FaultHook | None = None) -> None:
        """``universal``: resume through ds_to_universal (universal.needs_universal, decided before the
        engine is built). ``faults``: the fault-injection hook of tests; None in training."""
        self.cfg, self.module, self.state, self.universal = cfg, module, state, universal
        self.faults = faults
        self.dir = Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else None
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    def _fault(self, point: str, tag: str) -> None:
        if self.faults is not None:
            self.faults(point, tag)

    def save(self, iteration: int, position: dict[str, Any], callbacks: dict[str, dict[str, Any]] | None = None) -> str:
        """Collective: the checkpoint of ``iteration`` (trainer ``position``, the callbacks' states by key)."""
        assert self.dir is not None
        tag = tag_for(iteration)
        if self.rank == 0 and (self.dir / tag).is_dir() and read_latest(self.dir) != tag:
            # files of a crashed save of this tag (perhaps in another layout) must not mix with the new ones
            shutil.rmtree(self.dir / tag)
        dist.barrier()
        client_state = {
            **megatron.client_state(self.cfg, position, self.state),
            "bloomtrain": position,
            CALLBACKS_KEY: callbacks or {},
            "train_config": self.cfg.model_dump(mode="json"),
            "world_size": self.world,
            "universal_checkpoint_info": universal_checkpoint_info(self.cfg.model),
        }
        self.module.save(self.dir, tag, client_state, after_file=lambda _path: self._fault("engine_file", tag))
        save_rng(self.dir, tag, self.rank)
        if self.rank == 0:
            # rank 0's fused-kernel self-check (bloomtrain.kernels: every rank checks its own device the same way),
            # and what trained these weights (bloomtrain.provenance: a model card's first record)
            save_metadata(self.dir, tag, self.cfg.model, self.state.tp_size, self.state.pp_size,
                          extra={"kernel_selfcheck": selfcheck_report(),
                                 TRAINING_KEY: training_record(self.cfg, position, self.world)})
            save_layout(self.dir, tag, self.state)
        self._fault("after_metadata", tag)
        dist.barrier()  # every rank's files are on disk before `latest` moves
        self._fault("before_latest", tag)
        if self.rank == 0:
            commit_tag(self.dir, tag)
            prune(self.dir, self.cfg.checkpoint.keep_last, protect=tag)
        dist.barrier()
        return tag

    def load(self) -> Resumed | None:
        """Resume from ``latest`` (or its universal conversion): the trainer position and the callbacks' states
        (none in a checkpoint from before they were saved, or from Megatron-DeepSpeed); None without one."""
        if self.dir is None or not self.cfg.checkpoint.load:
            return None
        tag = read_latest(self.dir)
        if self.universal:
            if self.cfg.optim.precision != "bf16":
                raise BloomstackError("checkpoint.load_universal needs optim.precision=bf16 (DeepSpeed loads "
                                      "universal checkpoints into the BF16/ZeRO optimizer's fp32 fragments)")
            tag = ensure_universal(self.dir, tag)
        elif tag is None:
            return None
        else:
            check_same_layout(self.cfg, self.dir, tag, self.state)
        where = self.dir / tag
        saved = megatron.read_client(where)
        if saved is not None and saved.get("args") is not None:
            megatron.check_model(self.cfg.model, self.state.tp_size, saved["args"], where)
        checkpoints = self.dir  # not None here: load returned early without a checkpoint directory
        client = safe_load.guarded(where, lambda: self.module.load(checkpoints, tag))
        if client is None:
            raise BloomstackError(f"checkpoint {where} could not be loaded (see DeepSpeed's log above)")
        position = megatron.position_of(client, where)
        self._restore_rng(tag, client, position["iteration"])
        return Resumed(position, dict(client.get(CALLBACKS_KEY) or {}))

    def _restore_rng(self, tag: str, client: dict[str, Any], iteration: int) -> None:
        """This rank's RNG file; else (a Megatron-DeepSpeed checkpoint) the mp_rank file's RNG, which is this
        rank's streams (identical across TP and DP); else, in another layout, fresh streams."""
        assert self.dir is not None
        saved_world = client.get("world_size") or getattr(client.get("args"), "world_size", None)
        if not self.universal and saved_world == self.world:
            if load_rng(self.dir, tag, self.rank):
                return
            if "random_rng_state" in client:
                set_rng_state(client)
                return
            log.warning("bloomtrain: %s has no RNG state for rank %d; deriving fresh RNG streams",
                        self.dir / tag, self.rank)
        # another layout: rank-specific streams cannot be carried over; derive fresh ones
        seed_everything(self.cfg.seed + 100 * self.state.pp_rank + 7919 * iteration)
