"""``Checkpointer``: the collective save and resume of a training run; the only mover of ``latest``.

A save, on every rank, in this order::

    rank 0 removes a leftover <tag>/ of a crashed save; barrier
    DeepSpeed's engine files          layer files, mp_rank_*, optimizer shards (TrainModule.save: atomic, fsynced)
    rng/rank_RRRRR.pt                 this rank's RNG state (atomic, fsynced)
    bloomtrain_model.json, bloomtrain_layout.json     rank 0 only (atomic, fsynced; the model json also
                                      records the fused-kernel self-check and the training record)
    all-gather                        every rank's files are on disk; their sizes and digests, and a full disk
    rank 0: bloomtrain_manifest.json  every file's size and xxh3-128 digest (manifest.py); broadcast: it is written
    rank 0: commit_tag -> latest      atomic, fsynced; then prune old tags
    barrier

Every write goes through the rank's ``SaveLedger`` (manifest.py), which digests it as it is written. So
``latest`` always names a checkpoint whose every file is whole, durable and listed with its digest: a crash
(SIGKILL, node loss, power cut) at any point leaves ``latest`` at the previous complete tag, and the
half-written directory is removed when the next run starts (tags.sweep) or that tag is saved again.
``faults(point, tag)``, when given, is called at ``SAVE_POINTS`` (tests kill the process there to check exactly
this).

With ``checkpoint.async_save`` the save returns once every file's content is in host memory (background.py,
host_copy.py): DeepSpeed's states copied, the small files as bytes; a thread then writes them through the ledger
(the fault hook's ``engine_file`` after each file) and commits exactly as above, its gather, broadcast and barrier
on a gloo group of its own (``commit_group``), so they run beside training's collectives. The files are the same
bytes as a synchronous save's. A save waits for the one before it (``wait``), and so does the end of a run; a
crash or SIGKILL before the commit leaves ``latest`` at the previous tag, as it does in a synchronous save. A full disk
on any rank fails the whole save: every rank learns it from the all-gather, rank 0 removes the tag's directory, and
every rank raises the same ``DiskFull`` (bloomdata.disk): the save needed every byte the ranks counted, and the line
says how many, and how many are free once the partial tag is gone.

A resume checks the files of the tag ``latest`` names against its manifest before any tensor is read, each rank a
share of the bytes (``manifest.share``), in a thread that ``start_check`` starts before the engine is built, so the
check overlaps the build; the load waits for its verdict and all ranks gather theirs. A damaged file stops the run
(``checkpoint.on_corrupt=fail``) or, by default, the run resumes from the newest earlier tag whose files all verify and
moves ``latest`` back to it: the damaged tag is then an unfinished save, removed at the next start or replaced when its
iteration is saved again.

The trainer's own position (iteration, consumed and scheduled samples, skip counters) travels in
DeepSpeed's ``client_state``, beside Megatron-DeepSpeed's keys (megatron.py) that BLOOM-era tools read; the
schedules are functions of it, so they need no state of their own. A load reads every file with
``weights_only=True`` (safe_load), and resumes a checkpoint written by Megatron-DeepSpeed (its keys only) too.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist

from bloomdata.disk import disk_full
from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import megatron, safe_load
from bloomtrain.checkpoint.background import BackgroundSave, DeferredFiles
from bloomtrain.checkpoint.format import METADATA_FILE, metadata_bytes
from bloomtrain.checkpoint.host_copy import HostCopier
from bloomtrain.checkpoint.manifest import (
    MANIFEST_FILE,
    CheckpointDamaged,
    Damage,
    Manifest,
    PendingCheck,
    SaveLedger,
    Verdict,
    write_manifest,
)
from bloomtrain.checkpoint.rng import load_rng, save_rng, seed_everything, set_rng_state
from bloomtrain.checkpoint.tags import commit_tag, earlier_tags, prune, read_latest, sweep, tag_for
from bloomtrain.checkpoint.universal import check_same_layout, ensure_universal, save_layout
from bloomtrain.config import TrainConfig
from bloomtrain.kernels import selfcheck_report
from bloomtrain.parallel.pipeline import universal_checkpoint_info
from bloomtrain.parallel.state import ParallelState
from bloomtrain.parallel.timeouts import background_group
from bloomtrain.provenance import TRAINING_KEY, training_record
from bloomtrain.train_module import TrainModule

SAVE_POINTS = ("engine_file", "after_metadata", "before_latest")
"""Where a save calls its fault hook: after each file DeepSpeed's engine writes (asynchronous: each file the
background writes); after this rank's RNG and (rank 0) metadata files; after the barrier, before rank 0 moves
``latest``."""

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


def start_check(cfg: TrainConfig) -> PendingCheck | None:
    """This rank's share of the check of the tag ``latest`` names, started in a thread, so that it runs while the
    engine is built; None when this run loads no checkpoint. Call it after the process group is up."""
    ckpt = cfg.checkpoint.dir
    tag = read_latest(ckpt) if ckpt and cfg.checkpoint.load else None
    if ckpt is None or tag is None:
        return None
    return PendingCheck(Path(ckpt) / tag, dist.get_rank(), dist.get_world_size())


class Checkpointer:
    """Save and resume a TrainModule's engine plus the trainer position; all methods are collective."""

    def __init__(self, cfg: TrainConfig, module: TrainModule, state: ParallelState, *, universal: bool = False,
                 faults: FaultHook | None = None, precheck: PendingCheck | None = None) -> None:
        """``universal``: resume through ds_to_universal (universal.needs_universal, decided before the
        engine is built). ``faults``: the fault-injection hook of tests; None in training. ``precheck``: the check
        of ``latest``'s files started before the engine was built (``start_check``)."""
        self.cfg, self.module, self.state, self.universal = cfg, module, state, universal
        self.faults, self.precheck = faults, precheck
        self.dir = Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else None
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.committed: str | None = None
        """The newest tag ``latest`` names that this run saved or resumed from (every rank's files durable)."""
        self.stall_s: float | None = None
        """Seconds the last ``save`` call held training (the whole save when synchronous)."""
        self.write_s: float | None = None
        """Seconds the last finished background save took to write and commit (None: none finished)."""
        self.pending: BackgroundSave | None = None
        self.host: HostCopier | None = None
        self.commit_group: Any = None
        if cfg.checkpoint.async_save:
            self.save_in_background()

    def save_in_background(self) -> None:
        """Make the saves from now on asynchronous: ``checkpoint.async_save``, or a test or benchmark that saves one
        state both ways under one config. Collective: every rank calls it."""
        if self.dir is not None and self.host is None:
            self.host = HostCopier()
            self.commit_group = background_group()

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    @property
    def in_flight(self) -> str | None:
        """The tag being written in the background (None: none, or saves are synchronous)."""
        return self.pending.tag if self.pending is not None else None

    @property
    def progress_at(self) -> float | None:
        """``time.monotonic()`` when the background save not yet waited for last progressed (None: none)."""
        pending = self.pending
        return pending.progress_at if pending is not None else None

    def _fault(self, point: str, tag: str) -> None:
        if self.faults is not None:
            self.faults(point, tag)

    def save(self, iteration: int, position: dict[str, Any], callbacks: dict[str, dict[str, Any]] | None = None) -> str:
        """Collective: the checkpoint of ``iteration`` (trainer ``position``, the callbacks' states by key).
        Raises ``DiskFull`` on every rank, with ``latest`` unmoved and the tag removed, when a rank's disk is full.
        Asynchronous (``checkpoint.async_save``): returns once the state is in host memory; the files are written
        and the tag committed in the background (``wait``; a full disk is raised there, on every rank)."""
        assert self.dir is not None
        start = time.perf_counter()
        self.wait()  # a second save waits for the first
        tag = tag_for(iteration)
        if self.rank == 0 and (self.dir / tag).is_dir() and read_latest(self.dir) != tag:
            # files of a crashed save of this tag (perhaps in another layout) must not mix with the new ones
            shutil.rmtree(self.dir / tag)
        dist.barrier()
        if self.host is None:
            ledger = SaveLedger(self.dir / tag, self.rank)
            self._write_files(tag, position, callbacks, ledger.write)
            self._fault("after_metadata", tag)
            self._commit(tag, ledger)
        else:
            files = DeferredFiles()
            self._write_files(tag, position, callbacks, files.write, self.host.copy)
        self.stall_s = time.perf_counter() - start
        if self.host is not None:
            self.pending = BackgroundSave(tag, lambda: self._write_in_background(tag, files))
        return tag

    def wait(self) -> str | None:
        """Block until the background save (if one runs) is committed, and raise its error (``DiskFull``, the same
        on every rank) here; returns ``committed``. Nothing to wait for when saves are synchronous."""
        pending, self.pending = self.pending, None
        if pending is not None:
            self.write_s = pending.wait()
        return self.committed

    def _write_in_background(self, tag: str, files: DeferredFiles) -> None:
        """The background thread of an asynchronous save: write this rank's files, then commit the tag; rank 0 says
        when it is done, or at once that it failed (the error itself is raised by the next ``wait``)."""
        assert self.dir is not None and self.host is not None
        start, stall = time.perf_counter(), self.stall_s
        try:
            ledger = SaveLedger(self.dir / tag, self.rank)
            try:
                files.write_all(ledger.write, after_file=lambda _path: self._file_written(tag))
            finally:
                self.host.release()
            self._fault("after_metadata", tag)
            self._commit(tag, ledger, self.commit_group)
        except Exception as exc:
            if self.rank == 0:
                log.warning("bloomtrain: the background save of %s failed (%s); training goes on, and the next save "
                            "or the end of the run stops it with this error", tag, str(exc).splitlines()[0])
            raise
        if self.rank == 0:
            log.info("bloomtrain: saved %s in the background in %.2f s (training stalled %.2f s for it)", tag,
                     time.perf_counter() - start, stall or 0.0)

    def _file_written(self, tag: str) -> None:
        """In the background thread, after each file: progress for the hang watchdog, then the tests' fault hook."""
        pending = self.pending  # None for the moment between the thread's start and ``save``'s assignment
        if pending is not None and pending.tag == tag:
            pending.progressed()
        self._fault("engine_file", tag)

    def _commit(self, tag: str, ledger: SaveLedger, group: Any = None) -> None:
        """Collective on ``group``: the manifest once every rank's files are on disk, then ``latest``."""
        assert self.dir is not None
        self._commit_manifest(tag, ledger, group)
        self._fault("before_latest", tag)
        if self.rank == 0:
            commit_tag(self.dir, tag)
            prune(self.dir, self.cfg.checkpoint.keep_last, protect=tag)
        dist.barrier(group=group)
        self.committed = tag

    def _write_files(self, tag: str, position: dict[str, Any], callbacks: dict[str, dict[str, Any]] | None,
                     write: Any, host_copy: Any = None) -> None:
        """This rank's files of ``tag``, each through ``write``: the ledger (which stops writing once the disk is
        full), or an asynchronous save's ``DeferredFiles`` with DeepSpeed's states through ``host_copy``."""
        assert self.dir is not None
        client_state = {
            **megatron.client_state(self.cfg, position, self.state),
            "bloomtrain": position,
            CALLBACKS_KEY: callbacks or {},
            "train_config": self.cfg.model_dump(mode="json"),
            "world_size": self.world,
            "universal_checkpoint_info": universal_checkpoint_info(self.cfg.model),
        }
        after_file = None if host_copy else lambda _path: self._fault("engine_file", tag)
        self.module.save(self.dir, tag, client_state, write, after_file=after_file, host_copy=host_copy)
        save_rng(self.dir, tag, self.rank, write)
        if self.rank == 0:
            # rank 0's fused-kernel self-check (bloomtrain.kernels: every rank checks its own device the same way),
            # and what trained these weights (bloomtrain.provenance: a model card's first record)
            meta = metadata_bytes(self.cfg.model, self.state.tp_size, self.state.pp_size,
                                  extra={"kernel_selfcheck": selfcheck_report(),
                                         TRAINING_KEY: training_record(self.cfg, position, self.world)})
            write(self.dir / tag / METADATA_FILE, lambda f: f.write(meta))
            save_layout(self.dir, tag, self.state, write)

    def _commit_manifest(self, tag: str, ledger: SaveLedger, group: Any = None) -> None:
        """Collective: gather every rank's ledger; rank 0 writes the manifest. A full disk anywhere (the manifest's
        write included) removes the tag and raises the same ``DiskFull`` on every rank."""
        assert self.dir is not None
        ledgers: list[Any] = [None] * self.world
        dist.all_gather_object(ledgers, (ledger.full, ledger.needed, ledger.files), group=group)
        full = next((f for f, _n, _files in ledgers if f is not None), None)
        needed = sum(n for _f, n, _files in ledgers)
        if self.rank == 0 and full is None:
            manifest = SaveLedger(self.dir / tag, 0)
            files = {name: entry for _f, _n, entries in ledgers for name, entry in entries.items()}
            write_manifest(self.dir / tag, files, manifest.write)
            full, needed = manifest.full, needed + manifest.needed
        verdict = [full, needed]
        dist.broadcast_object_list(verdict, src=0, group=group)
        full, needed = verdict
        if full is None:
            return
        if self.rank == 0:
            shutil.rmtree(self.dir / tag, ignore_errors=True)  # every rank's files: the tag was never published
        dist.barrier(group=group)
        latest = read_latest(self.dir)
        raise disk_full(self.dir, f"saving {tag}", needed, key="checkpoint.dir",
                        then=f"run the same command again: it resumes from {latest or 'the start (no checkpoint yet)'}")

    def load(self) -> Resumed | None:
        """Resume from ``latest`` (or its universal conversion): the trainer position and the callbacks' states
        (none in a checkpoint from before they were saved, or from Megatron-DeepSpeed); None without one."""
        if self.dir is None:
            return None
        self._sweep()
        if not self.cfg.checkpoint.load:
            return None
        tag = read_latest(self.dir)
        if tag is not None:
            tag = self._verified(tag)
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
        self.committed = tag_for(position["iteration"])
        return Resumed(position, dict(client.get(CALLBACKS_KEY) or {}))

    def _sweep(self) -> None:
        """Collective, at the start: rank 0 removes unfinished saves and temporary files (tags.sweep)."""
        assert self.dir is not None
        if self.rank == 0 and self.dir.is_dir():
            tags, temps = sweep(self.dir)
            if tags or temps:
                log.warning("bloomtrain: %s: removed %s (left by a run that stopped while saving)", self.dir,
                            ", ".join([*(f"the unfinished save {t}" for t in tags),
                                       *([f"{temps} temporary file(s)"] if temps else [])]))
        dist.barrier()

    def _check(self, tag: str) -> Verdict:
        """Collective: the tag's files against its manifest, each rank a share of the bytes (the check started while
        the engine was built, when it is of this tag); the same on every rank."""
        assert self.dir is not None
        pending = self.precheck
        if pending is None or pending.tag_dir != self.dir / tag:
            pending = PendingCheck(self.dir / tag, self.rank, self.world)
        mine = pending.verdict()
        if not isinstance(pending.found, Manifest):  # no manifest, or a damaged one: every rank read the same file
            return mine
        damages: list[Damage | None] = [None] * self.world
        dist.all_gather_object(damages, mine.damage)
        return Verdict(digests=True, damage=next((d for d in damages if d is not None), None))

    def _verified(self, tag: str) -> str:
        """Collective: the tag to resume from: ``tag`` when its files verify (or it carries no digests); else, with
        ``checkpoint.on_corrupt=previous``, the newest earlier tag that verifies, which ``latest`` then names."""
        assert self.dir is not None
        verdict = self._check(tag)
        if not verdict.digests:
            if self.rank == 0:
                log.warning("bloomtrain: %s carries no digests (saved before bloomtrain recorded them in %s, or by "
                            "Megatron-DeepSpeed): loading it unverified", self.dir / tag, MANIFEST_FILE)
            return tag
        if verdict.damage is None:
            return tag
        damage = verdict.damage.line()
        if self.cfg.checkpoint.on_corrupt == "fail":
            raise CheckpointDamaged(f"{damage}; not resuming (checkpoint.on_corrupt=fail): restore the file, or set "
                                    "checkpoint.on_corrupt=previous to resume from the newest earlier checkpoint whose "
                                    "files all verify", keys=["checkpoint.on_corrupt"])
        for earlier in earlier_tags(self.dir, tag):
            found = self._check(earlier)
            if found.digests and found.damage is None:
                if self.rank == 0:
                    commit_tag(self.dir, earlier)
                    log.warning("bloomtrain: %s; resuming from %s, the newest earlier checkpoint whose files all "
                                "verify (checkpoint.on_corrupt=previous)", damage, earlier)
                dist.barrier()
                return earlier
        raise CheckpointDamaged(f"{damage}; no earlier checkpoint in {self.dir} has files that all verify: restore the "
                                "file, or start over in another checkpoint.dir", keys=["checkpoint.dir"])

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
