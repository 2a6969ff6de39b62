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
- a lost Dask cluster (``ClusterLost``, raised by ``bloomdata.jobs.executor``) says how many shards are done (``marked``);
- a full disk, in a worker or here (an ``OSError`` ENOSPC, or the ``DiskFull`` a worker hands back): after the sweep of
  what no marker vouches for, one line (``bloomdata.disk.DiskFull``, exit 2) naming the output directory, its
  filesystem, the space the rest of the job needs (``space_needed``: the job's estimate) and the space free, and
  how many shards are done (a rerun reuses them).

``Placement`` says where the steps run (a caller's Dask client, an existing scheduler, a LocalCluster of
``workers`` processes opened once for the whole run when a stage first has work, or this process with
``workers=0``) and runs each stage with a progress bar (``Placement.map``).

A job is a subclass: it plans its shards before it is built (planning is the job's own: whole files, row
ranges, byte ranges), and implements ``intact`` and ``work``; ``prepare``, ``on_failure`` and ``finish`` are
hooks around them. The trade-off: the summary model must have ``rejects_total`` and ``up_to_date``, the two
fields the runner reads and sets.
"""

from __future__ import annotations

import contextlib
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from bloomdata import durable
from bloomdata.disk import DiskFull, disk_full, is_disk_full
from bloomdata.errors import BloomstackError
from bloomdata.readers import Reject, Shard

S = TypeVar("S", bound=BaseModel)


def strict_error(reject: Reject) -> BloomstackError:
    """``strict``'s error for a rejected row, ``reject.line`` being the file's line."""
    return BloomstackError(f"{reject.path}:{reject.line}: {reject.reason} ({reject.detail or 'no detail'}); fix or "
                           "drop that row, or turn strict off to skip and count it", keys=["strict"])


class ClusterLost(BloomstackError):
    """The Dask scheduler, or every worker of an external one, went away while ``run_shards`` ran.

    ``lost``: what went away; ``restart``: what the user starts again before the rerun ("" when nothing)."""

    def __init__(self, lost: str, restart: str, done: str = "") -> None:
        fix = f"{restart}, then rerun the same command" if restart else "rerun the same command"
        super().__init__(f"{lost}{done}: {fix}")
        self.lost, self.restart = lost, restart

    def counting(self, done: int, total: int, what: str = "shards") -> ClusterLost:
        """The same error saying how much is done (the caller counts its completion markers)."""
        return ClusterLost(self.lost, self.restart, f" with {done} of {total} {what} done (a rerun reuses them)")


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


@dataclass
class Placement:
    """Where a job's steps run, and one client for all its stages (enter it as a context: it closes what it
    opened). ``client``: a caller's ``distributed.Client``; else ``scheduler`` (tcp://host:port) or a LocalCluster
    of ``workers`` processes, opened when a stage first has work; ``workers=0``: in this process."""

    workers: int = 2
    scheduler: str | None = None
    client: Any = None
    progress: bool = True
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, repr=False)
    _given: bool = field(init=False, repr=False)  # the client was the caller's (not one we opened)

    def __post_init__(self) -> None:
        self._given = self.client is not None

    def __enter__(self) -> Placement:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    @property
    def recorded_workers(self) -> int | None:
        """The worker count a summary records: None on a cluster that is not ours (a scheduler or a client)."""
        return None if self.scheduler or self._given else self.workers

    def _dask(self) -> Any:
        if self.client is None and (self.scheduler or self.workers > 0):
            from bloomdata.jobs.executor import dask_client  # noqa: PLC0415 - dask only when a stage has work

            self.client = self._stack.enter_context(dask_client(self.workers, self.scheduler))
        return self.client

    def map(self, name: str, step: Callable[[Any], Any], items: Sequence[Any],
            on_result: Callable[[int, Any], None] | None = None, *, done_before: int = 0,
            postfix: Callable[[], dict[str, Any]] | None = None) -> list[Any]:
        """``[step(item) for item in items]`` on this placement, in item order, with a progress bar counting
        ``done_before`` tasks already done (reused); ``on_result(i, result)`` as each finishes."""
        from tqdm import tqdm  # noqa: PLC0415

        from bloomdata.jobs.executor import run_shards  # noqa: PLC0415

        bar = tqdm(total=len(items) + done_before, initial=done_before, unit="task", desc=name,
                   disable=not self.progress, file=sys.stderr, dynamic_ncols=True, mininterval=0.5)

        def done(i: int, result: Any) -> None:
            if on_result is not None:
                on_result(i, result)
            if postfix is not None:
                bar.set_postfix(postfix(), refresh=False)
            bar.update(1)

        try:
            client = self._dask() if items else None
            return run_shards(step, items, n_workers=0, client=client, on_result=done)
        finally:
            bar.close()


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
    fingerprint: str  # content key of everything that determines the outputs
    where: Placement
    strict: bool = False


class ShardedJob(ABC, Generic[S]):
    """A durable sharded job (see the module docstring): subclasses set ``files`` and ``summary_type``."""

    files: ClassVar[JobFiles]
    summary_type: type[S]

    def __init__(self, plan: JobPlan) -> None:
        inside = [s.path for s in plan.shards if os.path.commonpath([plan.out_dir, s.path]) == plan.out_dir]
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
    def work(self) -> S:
        """Every stage of the job (under the lock, when not up to date); returns the summary to record."""

    def prepare(self) -> None:
        """Under the lock, before the up-to-date check (e.g. sweep what another plan left)."""

    def on_failure(self) -> None:
        """After ``work`` raised: remove what no marker vouches for (by default stray temps)."""
        remove_stray_temps(self.plan.out_dir)

    def finish(self, summary: S) -> None:
        """After the summary is written (e.g. remove the work files)."""

    def marked(self) -> int:
        """Shards whose completion marker is valid now: a lost Dask cluster's message says how many are done
        (a rerun reuses them)."""
        return 0

    def done_bytes(self) -> list[int]:
        """The bytes the first stage's files of each done shard take (what ``marked`` counts), for ``space_needed``."""
        return []

    def bytes_per_input_byte(self) -> float:
        """What ``space_needed`` assumes per input byte while no shard is done."""
        return 1.0

    def space_needed(self) -> int:
        """About the bytes the rest of the job writes at its peak: the first stage's files of the shards not done, at
        the average size of the done ones (with none done, ``bytes_per_input_byte`` of the input), and as much again
        for the files of the later stages beside them (the build's merged outputs equal its parts; clean's join,
        write and output files measured 0.55x its filter files on the test corpus)."""
        sizes, total = self.done_bytes(), len(self.plan.shards)
        if sizes:
            per_shard = sum(sizes) / len(sizes)
        else:
            inputs = sum(os.path.getsize(path) for path in {s.path for s in self.plan.shards})
            per_shard = self.bytes_per_input_byte() * inputs / total
        return round(per_shard * (2 * total - len(sizes)))

    def out_of_space(self) -> DiskFull:
        """The full disk's one line, once the sweep after the failure is done (``on_failure``)."""
        done, total = self.marked(), len(self.plan.shards)
        return disk_full(self.plan.out_dir, f"this {self.files.writer}", self.space_needed(), estimated=True,
                         key="out_dir", then=f"run the same command again ({done} of {total} {self.files.marked} "
                                             "done: it reuses them)")

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
                return previous.model_copy(update={"up_to_date": True})
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
