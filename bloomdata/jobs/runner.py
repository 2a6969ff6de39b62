"""The one durable sharded job: what ``bloomdata build`` and ``bloomdata clean`` share around their steps.

A job writes one output directory from sharded inputs, in stages of pure, idempotent per-shard steps that
each leave a completion marker (``bloomdata.durable``). ``ShardedJob.run`` owns, the same way for every job:

- the output-vs-input check: an output directory that holds an input is refused before anything is written
  (a rerun would read the outputs back as inputs);
- the lock: one writer per directory (``durable.owned_directory``), so temps found there belong to dead
  writers; they are swept (``durable.remove_temps`` over the tree) before the work and after a failure;
- the up-to-date check: the job's summary is its marker, keyed by the job's ``fingerprint`` (the content key
  of every shard key and the output settings) and written last; a rerun whose fingerprint matches and whose
  outputs are ``intact`` returns it marked ``up_to_date`` and does nothing, unless ``strict`` must look at
  rejects an earlier lenient run skipped;
- the --strict message for a rejected row (``strict_error``), wherever the job finds it;
- the first stage: every shard without a valid completion marker runs, the others are reused
  (``first_stage``);
- a lost Dask cluster (``bloomdata.errors.ClusterLost``, raised by ``bloomdata.jobs.executor``) says how many
  shards are done (``marked``);
- a full disk, in a worker or here (an ``OSError`` ENOSPC, or the ``DiskFull`` a worker hands back): after the sweep of
  what no marker vouches for, one line (``bloomdata.disk.DiskFull``, exit 2) naming the output directory, its
  filesystem, the space the rest of the job needs (``space_needed``: the job's estimate) and the space free, and
  how many shards are done (a rerun reuses them).

Where the steps run is the job's ``Where`` (``bloomdata.jobs.placement.Placement``: a caller's Dask client, an
existing scheduler, a LocalCluster of ``workers`` processes opened once for the whole run when a stage first
has work, or this process with ``workers=0``), which runs each stage with a progress bar. This module never
imports the executor (nor Dask).

A job is a subclass: it plans its shards and their first-stage keys before it is built (planning is the
job's own: whole files, row ranges, byte ranges), and implements ``load_marker``, ``intact`` and ``work``;
``prepare``, ``on_failure`` and ``finish`` are hooks around them. The trade-off: the summary model must have
``rejects_total`` and ``up_to_date``, the two fields the runner reads and sets.
"""

from __future__ import annotations

import contextlib
import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from pydantic import BaseModel

from bloomdata import durable
from bloomdata.config_loader import derive
from bloomdata.disk import DiskFull, disk_full, is_disk_full
from bloomdata.dry_run import Inputs, PlannedFile, inputs_of
from bloomdata.errors import BloomstackError, ClusterLost
from bloomdata.readers import Reject, Shard, input_bytes
from bloomdata.readers.fs import is_remote

S = TypeVar("S", bound=BaseModel)  # a job's summary
M = TypeVar("M", bound=BaseModel)  # a shard's first-stage manifest


def strict_error(reject: Reject) -> BloomstackError:
    """``strict``'s error for a rejected row, ``reject.line`` being the file's line."""
    return BloomstackError(f"{reject.path}:{reject.line}: {reject.reason} ({reject.detail or 'no detail'}); fix or "
                           "drop that row, or turn strict off to skip and count it", keys=["strict"])


@contextlib.contextmanager
def counting_done(done: Callable[[], int], total: int, what: str = "shards") -> Iterator[None]:
    """Inside: a ClusterLost also says how much is done; ``done()`` counts the caller's completion markers
    once the cluster is lost (a task may have finished after its result could no longer arrive)."""
    try:
        yield
    except ClusterLost as lost:
        raise lost.counting(done(), total, what) from None


def remove_stray_temps(out_dir: str) -> None:
    """Temp files of killed runs or workers anywhere under ``out_dir``. Called under the lock, so no live run
    owns them (an orphaned task on an external cluster may; it redoes its shard)."""
    for root, _, _ in os.walk(out_dir):
        durable.remove_temps(root)


class Where(Protocol):
    """Where a job's steps run, one stage after another (``bloomdata.jobs.placement.Placement``): a context that
    closes what it opened."""

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: object) -> None: ...

    @property
    def recorded_workers(self) -> int | None:
        """The worker count a summary records (None: a cluster that is not the job's own)."""

    def map(self, name: str, step: Callable[[Any], Any], items: Sequence[Any],
            on_result: Callable[[int, Any], None] | None = None, *, done_before: int = 0,
            postfix: Callable[[], dict[str, Any]] | None = None) -> list[Any]:
        """``[step(item) for item in items]`` there, in item order, with a progress bar."""


@dataclass(frozen=True)
class JobFiles:
    """The files a kind of job owns in its output directory."""

    writer: str  # what the lock's error calls it: "build", "clean run"
    lock: str  # the lock file's name
    summary: str  # the job's summary, its marker (written last)
    marked: str = "shards"  # what ``ShardedJob.marked`` counts, for a lost cluster's message


@dataclass
class JobPlan:
    """What a job decided before writing anything: where, from which shards, with which fingerprint."""

    out_dir: str  # absolute
    shards: list[Shard]
    keys: list[str]  # per shard: the key of its first stage's completion marker
    fingerprint: str  # content key of everything that determines the outputs
    where: Where
    strict: bool = False
    shard_bytes: int | None = None  # the size large files were cut to (None: not cut by size)


class JobPreview(BaseModel):
    """What a job would do (``--dry-run``), decided by the same planning as its run, with nothing written."""

    out_dir: str
    out_dir_exists: bool
    up_to_date: bool  # an earlier run's summary matches and its outputs are intact: the run would do nothing
    inputs: Inputs
    shards: int
    shards_done: int  # shards whose completion marker a run would reuse
    shard_bytes: int | None  # the size large files are cut to (None: not cut by size)
    workers: str  # where the steps would run
    outputs: list[PlannedFile]  # the files it would write, with estimated sizes
    peak_disk_bytes: int  # about the space the rest of the job needs at its peak (the runner's own estimate)


class ShardedJob(ABC, Generic[S, M]):
    """A durable sharded job (see the module docstring): subclasses set ``files`` and ``summary_type``; ``M`` is
    the manifest its first stage leaves per shard."""

    files: ClassVar[JobFiles]
    summary_type: type[S]

    def __init__(self, plan: JobPlan) -> None:
        inside = [s.path for s in plan.shards
                  if not is_remote(s.path) and os.path.commonpath([plan.out_dir, s.path]) == plan.out_dir]
        if inside:
            raise BloomstackError(f"the output directory {plan.out_dir} holds an input ({inside[0]}); a rerun would "
                                  "read the outputs back as inputs: choose an out_dir outside the inputs",
                                  keys=["out_dir"])
        self.plan = plan

    @property
    def summary_path(self) -> str:
        return os.path.join(self.plan.out_dir, self.files.summary)

    @abstractmethod
    def intact(self, summary: S) -> bool:
        """Whether the outputs an earlier summary vouches for are all still there, as recorded."""

    @abstractmethod
    def load_marker(self, shard: Shard, key: str) -> M | None:
        """The first stage's manifest of ``shard`` when its marker is valid under ``key``; None otherwise."""

    @abstractmethod
    def work(self) -> S:
        """Every stage of the job (under the lock, when not up to date); returns the summary to record."""

    def prepare(self) -> None:
        """Under the lock, before the up-to-date check (e.g. sweep what another plan left)."""

    def on_failure(self) -> None:
        """After ``work`` raised: remove what no marker vouches for (by default stray temps)."""
        remove_stray_temps(self.plan.out_dir)

    def finish(self, summary: S) -> None:
        """After the summary is written (e.g. remove the work files)."""

    def done_shards(self) -> list[tuple[Shard, M]]:
        """The shards whose first-stage marker is valid now, with their manifests, in plan order."""
        found = ((s, self.load_marker(s, k)) for s, k in zip(self.plan.shards, self.plan.keys))
        return [(s, m) for s, m in found if m is not None]

    def marked(self) -> int:
        """Shards whose first-stage marker is valid now: a lost Dask cluster's message says how many are done
        (a rerun reuses them)."""
        return len(self.done_shards())

    def first_stage(self, name: str, step: Callable[[Shard], M], count: Callable[[M], None] | None = None,
                    postfix: Callable[[], dict[str, Any]] | None = None) -> tuple[list[M], list[int]]:
        """``step`` over every shard without a valid marker, where the job runs; (every shard's manifest in plan
        order, the shards run now). ``count(manifest)``: for each reused manifest, then each new one as it comes
        (``postfix`` shows the counts beside the progress bar)."""
        shards = self.plan.shards
        found = [self.load_marker(s, k) for s, k in zip(shards, self.plan.keys)]
        pending = [i for i, m in enumerate(found) if m is None]
        for manifest in found:
            if manifest is not None and count is not None:
                count(manifest)

        def done(j: int, manifest: M) -> None:
            found[pending[j]] = manifest
            if count is not None:
                count(manifest)

        self.plan.where.map(name, step, [shards[i] for i in pending], done, done_before=len(shards) - len(pending),
                            postfix=postfix)
        manifests = [m for m in found if m is not None]
        assert len(manifests) == len(shards)  # every pending shard returned its manifest
        return manifests, pending

    def first_stage_bytes(self, shard: Shard, manifest: M) -> int | None:
        """The bytes the first stage's files of a done shard take, for ``space_needed``; None: the job does not
        say (``space_needed`` then goes by ``bytes_per_input_byte``)."""
        return None

    def bytes_per_input_byte(self) -> float:
        """What ``space_needed`` assumes per input byte while no shard is done."""
        return 1.0

    def space_needed(self) -> int:
        """About the bytes the rest of the job writes at its peak: the first stage's files of the shards not done, at
        the average size of the done ones (with none done, ``bytes_per_input_byte`` of the input), and as much again
        for the files of the later stages beside them (the build's merged outputs equal its parts; clean's join,
        write and output files measured 0.55x its filter files on the test corpus)."""
        found, total = [self.first_stage_bytes(s, m) for s, m in self.done_shards()], len(self.plan.shards)
        known = [n for n in found if n is not None]
        sizes = known if len(known) == len(found) else []  # a job that does not say: as if none were done
        if sizes:
            per_shard = sum(sizes) / len(sizes)
        else:
            inputs = sum(input_bytes(path) for path in {s.path for s in self.plan.shards})
            per_shard = self.bytes_per_input_byte() * inputs / total
        return round(per_shard * (2 * total - len(sizes)))

    def out_of_space(self) -> DiskFull:
        """The full disk's one line, once the sweep after the failure is done (``on_failure``)."""
        done, total = self.marked(), len(self.plan.shards)
        return disk_full(self.plan.out_dir, f"this {self.files.writer}", self.space_needed(), estimated=True,
                         key="out_dir", then=f"run the same command again ({done} of {total} {self.files.marked} "
                                             "done: it reuses them)")

    def planned_outputs(self) -> list[PlannedFile]:
        """The files the job would write, with estimated sizes where the job can tell (``preview``)."""
        return []

    def preview(self, workers: str) -> JobPreview:
        """The plan (``--dry-run``): reads the inputs' sizes and any earlier run's markers; writes nothing, starts
        no cluster. ``workers``: where the steps would run, in words."""
        p = self.plan
        exists = os.path.isdir(p.out_dir)
        up_to_date = exists and self.previous() is not None
        return JobPreview(out_dir=p.out_dir, out_dir_exists=exists, up_to_date=up_to_date,
                          inputs=inputs_of(p.shards), shards=len(p.shards), shards_done=self.marked() if exists else 0,
                          shard_bytes=p.shard_bytes,
                          workers=workers, outputs=self.planned_outputs(),
                          peak_disk_bytes=0 if up_to_date else self.space_needed())

    def previous(self) -> S | None:
        """The summary of an earlier run with this fingerprint whose outputs are intact; None otherwise."""
        summary = durable.read_manifest(self.summary_path, self.plan.fingerprint, self.summary_type)
        return summary if summary is not None and self.intact(summary) else None

    def run(self) -> S:
        """Lock, sweep, return the up-to-date summary or do the work and record its summary (last)."""
        p = self.plan
        with durable.owned_directory(p.out_dir, self.files.lock, self.files.writer), p.where:
            remove_stray_temps(p.out_dir)
            self.prepare()
            previous = self.previous()
            # every job summary has rejects_total (see the module docstring); S is bound to BaseModel only
            if previous is not None and not (p.strict and getattr(previous, "rejects_total")):  # noqa: B009
                return derive(previous, up_to_date=True)
            try:
                with counting_done(self.marked, len(p.shards), self.files.marked):
                    summary = self.work()
                durable.write_marker(self.summary_path, p.fingerprint, summary)
            except BaseException as exc:
                self.on_failure()
                if isinstance(exc, DiskFull) or is_disk_full(exc):
                    raise self.out_of_space() from None
                raise
            self.finish(summary)
        return summary
