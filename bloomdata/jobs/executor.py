"""Run one function over many shards on Dask: the only module of bloomdata that imports dask/distributed.

``bloomdata.jobs.placement.Placement`` (where a job's stages run) opens its cluster here.

``run_shards(fn, items, ...)`` is the executor half of datatrove's step/executor split: ``fn`` is a pure,
idempotent, importable step (``bloomdata.build.shard.tokenize_shard``) that takes a shard and returns a small
manifest; this module only decides *where* it runs. Choices and their reasons:

- A ``distributed.LocalCluster`` of N worker *processes* with one thread each (the tokenizer's Python
  glue, JSON parsing and the writers hold the GIL, so threads would not scale), its dashboard off unless
  asked (``dashboard``: Dask's :8787, another port when taken; the link printed in one line); or an existing
  cluster (``scheduler_address``), or a caller's ``Client`` (tests and flows share one).
  ``n_workers=0`` runs in the calling process, for debugging.
- Workers get ``TOKENIZERS_PARALLELISM=false``: parallelism comes from processes, and Rayon threads on top
  would oversubscribe the cores. A LocalCluster sets it at worker start (Nanny ``env``; Dask's
  statistical profiler is off there too); a worker plugin sets it on the workers of an existing cluster,
  before any task runs there.
- Tasks get random keys (``pure=False``): a rerun must run the step again (it checks its own completion
  marker), never be answered from a result Dask still holds.
- Results come back as tasks finish (a done-callback per future) for progress, but are returned in input order, so
  callers never depend on scheduling. The first failure cancels the remaining tasks and is re-raised;
  a task that keeps killing its workers becomes a ``BloomstackError`` naming the item.
- A ``BloomstackError`` (bad user input: a missing column, a --strict reject) is caught in the task and
  returned as a value, then raised here: for Dask the task succeeded, so the worker never logs its
  multi-line "Compute Failed ... Traceback" dump (at ERROR level, so ``silence_logs`` cannot hide it, and
  on an external cluster its logging is not ours to set). The user sees the one-line message only. A full disk
  (ENOSPC) comes back the same way, as a ``DiskFull``. Other exceptions are bugs: they still fail the task, with
  the worker's log and the traceback.
- A lost cluster (the scheduler gone, or an external scheduler left without workers for ``WORKERS_GONE_S``)
  raises ``ClusterLost``: one line naming the scheduler and what to restart; the callers add how many shards
  are done (their markers stay, so a rerun reuses them). Dask's own "Failed to reconnect to scheduler after
  30.00 seconds" log line, printed when the client closes however soon the loss came, and the tracebacks of
  the coroutines that close cancels, are dropped; so is the heartbeat traceback a worker of our own
  LocalCluster may log as it closes after an error.
- Called from inside a Dask task (a Prefect task on a DaskTaskRunner), the shards run on that same
  cluster through ``worker_client``: a daemonic worker process cannot start a LocalCluster of its own.
- Workers of our own LocalCluster start without re-importing the caller's ``__main__`` (multiprocessing's
  spawn would: under ``python -m flows.rehearsal`` every worker imported torch, Prefect and the trainer;
  2 workers took 8.45 s to start, 454 MB each, where 1.12 s and 70 MB do). A worker the Nanny restarts later
  does import it, so scripts that call this must still guard their entry point with
  ``if __name__ == "__main__":`` and keep task code in importable modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import importlib.util
import logging
import os
import queue
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dask.config
from dask.utils import funcname
from distributed import Client, LocalCluster, WorkerPlugin, get_worker, worker_client
from distributed.client import AllExit, FutureCancelledError
from distributed.scheduler import KilledWorker

from bloomdata.disk import DiskFull, is_disk_full
from bloomdata.environ import environ_restored
from bloomdata.errors import BloomstackError, ClusterLost

WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false"}
# Dask's statistical profiler samples the task thread's stack every 10 ms (taking the GIL); we never read
# those profiles, and on a 2-core box its CPU comes straight out of tokenizing. The Nanny hands the
# parent's Dask config to each worker it starts (and restarts), so it is set around the cluster's creation.
WORKER_CONFIG = {"distributed.worker.profile.enabled": False}
CONNECT_TIMEOUT_S = 30  # to reach an existing scheduler and see at least one worker
WORKERS_GONE_S = 30.0  # an external scheduler without any worker this long, mid-run: the worker set is lost
POLL_S = 2.0  # how often run_shards checks the workers while no task finishes
# Tasks run_shards keeps submitted and not yet taken, at least (or 4 per worker thread, when more): the
# scheduler holds each submitted task's spec (kilobytes each, more with a large fn), so a job of 100,000
# shards submitted at once would hold about a gigabyte in the driver before the first result.
SUBMIT_WINDOW = 512


class _DropLostSchedulerNoise(logging.Filter):
    """Dask's client logs, after its scheduler went away: "Failed to reconnect to scheduler after 30.00 seconds"
    when it closes (however soon that is), a CancelledError traceback per coroutine the close cancels, and
    "Couldn't gather 1 keys, rescheduling (...)" when a result was being fetched as it went. The job's own
    one-line error says what was lost and what a rerun reuses."""

    NOISE = ("Failed to reconnect to scheduler", "Couldn't gather ")

    def filter(self, record: logging.LogRecord) -> bool:
        cancelled = record.exc_info is not None and isinstance(record.exc_info[1], asyncio.CancelledError)
        return not (cancelled or record.getMessage().startswith(self.NOISE))


logging.getLogger("distributed.client").addFilter(_DropLostSchedulerNoise())


class _DropAbandonedGather(logging.Filter):
    """asyncio's "Task exception was never retrieved ... AllExit": the inner task of a result gather that
    ``_result`` stopped waiting for, ended when the client closes its futures after a lost worker set."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info is not None and isinstance(record.exc_info[1], AllExit))


logging.getLogger("asyncio").addFilter(_DropAbandonedGather())


class _DropHeartbeatLoss(logging.Filter):
    """A worker of our LocalCluster logs "Failed to communicate with scheduler during heartbeat", with a
    traceback, when a heartbeat is in flight as the cluster closes (it did after a one-line user error). The
    scheduler runs in the driver's process, so it is never lost while the driver still reports."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to communicate with scheduler during heartbeat")


class _LocalWorkerLogs(WorkerPlugin):
    """Adds ``_DropHeartbeatLoss`` to the workers of a LocalCluster we start (never to another cluster's)."""

    name = "bloomdata-local-worker-logs"

    def setup(self, worker) -> None:
        logging.getLogger("distributed.worker").addFilter(_DropHeartbeatLoss())


class _WorkerEnv(WorkerPlugin):
    """Sets ``WORKER_ENV`` in every worker of a cluster we did not start (and in ones that join later)."""

    name = "bloomdata-worker-env"

    def setup(self, worker) -> None:
        os.environ.update(WORKER_ENV)


@contextlib.contextmanager
def dask_client(n_workers: int = 2, scheduler_address: str | None = None, dashboard: bool = False) -> Iterator[Client]:
    """A Client on a fresh LocalCluster (closed on exit) or on an existing scheduler; ``dashboard``: serve the
    LocalCluster's dashboard and print the cluster's dashboard link."""
    if scheduler_address:
        try:
            client = Client(scheduler_address, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise BloomstackError(f"cannot connect to Dask at {scheduler_address} ({exc}); start a cluster there "
                                 "with `dask scheduler` plus `dask worker ADDR`, or unset scheduler",
                                 keys=["scheduler"]) from None
        with client:
            try:
                client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
            except TimeoutError:
                raise BloomstackError(f"the Dask scheduler at {scheduler_address} has no workers after "
                                      f"{CONNECT_TIMEOUT_S}s; "
                                      f"start some with `dask worker {scheduler_address}`") from None
            _print_dashboard(client, dashboard)
            yield client
        return
    if n_workers < 1:
        raise BloomstackError(f"a local Dask cluster needs at least 1 worker, got {n_workers}")
    if _inside_dask_worker():
        # e.g. a Prefect task on a DaskTaskRunner: workers are daemonic and cannot start a LocalCluster,
        # so the shards go to the cluster we are already on (the task secedes from its worker thread)
        with worker_client() as client:
            yield client
        return
    with _parent_environ_restored(), _main_not_reimported():
        with warnings.catch_warnings(), dask.config.set(WORKER_CONFIG):
            # the scheduler serves HTTP (/health; the dashboard when on) on 8787 or, when taken, any free port
            warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
            cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, env=dict(WORKER_ENV),
                                   dashboard_address=_dashboard_address(dashboard), silence_logs=logging.ERROR)
        with cluster, Client(cluster) as client:
            client.register_plugin(_LocalWorkerLogs())
            _print_dashboard(client, dashboard)
            yield client


def _dashboard_address(dashboard: bool) -> str | None:
    if dashboard and importlib.util.find_spec("bokeh") is None:
        raise BloomstackError("dashboard: Dask's dashboard needs bokeh; install it with "
                              "`pip install 'bloomstack[dashboard]'`, or leave dashboard off", keys=["dashboard"])
    return ":8787" if dashboard else None


def _print_dashboard(client: Client, dashboard: bool) -> None:
    if dashboard:
        print(f"Dask dashboard: {client.dashboard_link}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _parent_environ_restored() -> Iterator[None]:
    """Undo, on exit, what the Nanny writes into this process's environment.

    Before spawning each worker the Nanny sets ``distributed.nanny.pre-spawn-environ`` (OMP_NUM_THREADS=1,
    MKL_NUM_THREADS=1, ...) in *our* os.environ and never restores it: everything this process ran after a
    build (the C++ index builders, numpy's BLAS, torch) was left on one thread.
    """
    keys = set(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}) | {"PYTHONHASHSEED"}
    with environ_restored(keys):
        yield


@contextlib.contextmanager
def _main_not_reimported() -> Iterator[None]:
    """Workers spawned meanwhile do not import this process's ``__main__`` module.

    multiprocessing's spawn re-imports the parent's main module in every child (as ``__mp_main__``): by name
    for ``python -m flows.rehearsal``, by path for a script. Every Dask worker so imported what the caller's
    main module imports (there: torch, Prefect and the trainer), which bloomdata's tasks never use. The tasks
    are functions of importable modules (cloudpickle sends a ``__main__`` function by value), so the workers
    need nothing from it. The process-wide change lasts while the cluster starts: a worker the Nanny restarts
    later imports the main module again.
    """
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved: dict[str, Any] = {name: main.__dict__[name] for name in ("__spec__", "__file__") if name in main.__dict__}
    main.__spec__ = None  # what spawn reads first (the module's name); then __file__ (a script's path)
    main.__dict__.pop("__file__", None)
    try:
        yield
    finally:
        main.__dict__.update(saved)


@dataclasses.dataclass(frozen=True)
class _UserError:
    """A task's BloomstackError, carried back as its result (see the module docstring)."""

    error: BloomstackError


def _step(fn: Callable[[Any], Any], item: Any) -> Any:
    """``fn(item)`` in a worker, with a BloomstackError returned as a ``_UserError`` instead of raised; so is a
    full disk, as a ``DiskFull`` (the caller says how much space the job needs)."""
    try:
        return fn(item)
    except BloomstackError as exc:
        return _UserError(exc)
    except Exception as exc:
        if not is_disk_full(exc):
            raise
        return _UserError(DiskFull(f"{getattr(item, 'name', None) or repr(item)}: {exc}"))


def _inside_dask_worker() -> bool:
    try:
        get_worker()
    except ValueError:
        return False
    return True


def run_shards(fn: Callable[[Any], Any], items: Sequence[Any], *, n_workers: int = 2,
               scheduler_address: str | None = None, client: Client | None = None,
               on_result: Callable[[int, Any], None] | None = None) -> list[Any]:
    """``[fn(item) for item in items]``, computed on Dask; ``on_result(index, result)`` as each finishes.

    ``fn`` and the items must pickle (module-level functions, ``functools.partial`` of them, dataclasses).
    """
    results: list[Any] = [None] * len(items)
    if not items:
        return results
    if client is None and scheduler_address is None and n_workers == 0:
        for i, item in enumerate(items):  # in-process: same code path, no cluster (debugging, tiny inputs)
            results[i] = fn(item)
            if on_result is not None:
                on_result(i, results[i])
        return results
    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(dask_client(n_workers, scheduler_address))
        client.register_plugin(_WorkerEnv())  # idempotent (named); a no-op on our own LocalCluster
        window = _Window(client, fn, items)
        try:
            _collect(client, window, items, results, on_result)
        except BaseException:
            if client.status == "running":
                client.cancel(list(window.futures.values()))
            raise
    return results


class _Window:
    """The tasks of ``items`` submitted in item order, at most ``SUBMIT_WINDOW`` (or 4 per worker thread) ahead
    of the results taken; each submitted future queues itself in ``finished`` when it is done.

    Each future is dropped once its result is taken (``take``): while the client holds a future, its worker
    keeps the finished task, with its own unpickled copy of ``fn`` (the roots preset's word lists: ~0.75 MB a
    task), so a 10 GB roots clean's workers grew by the shards they had run (260 MB against 198 at 1 GB)."""

    def __init__(self, client: Client, fn: Callable[[Any], Any], items: Sequence[Any]):
        self.client, self.items = client, items
        self.step = functools.partial(_step, fn)
        self.name = funcname(fn)  # keys named after fn (e.g. tokenize_shard-<uuid>-<i>), not after the wrapper
        self.finished: queue.SimpleQueue = queue.SimpleQueue()
        self.futures: dict[int, Any] = {}  # item index -> future, submitted and not yet taken
        self.position: dict[Any, int] = {}  # future key -> item index
        self.submitted, self.size = 0, SUBMIT_WINDOW
        self.top_up()

    def top_up(self) -> None:
        """Submit the next items, once half the window has been taken (the window's size is read again then:
        workers may have joined)."""
        if self.submitted == len(self.items) or len(self.futures) > self.size // 2:
            return
        self.size = max(SUBMIT_WINDOW, 4 * sum(self.client.nthreads().values()))
        end = min(len(self.items), self.submitted + self.size - len(self.futures))
        chunk = self.client.map(self.step, list(self.items[self.submitted:end]), key=self.name, pure=False)
        for i, future in enumerate(chunk, self.submitted):
            self.futures[i] = future
            self.position[future.key] = i
            future.add_done_callback(self.finished.put)
        self.submitted = end

    def take(self, future: Any) -> int:
        """The item index of a finished future, which the window forgets (the scheduler releases its task)."""
        i = self.position.pop(future.key)
        del self.futures[i]
        return i


def _collect(client: Client, window: _Window, items: Sequence[Any], results: list[Any],
             on_result: Callable[[int, Any], None] | None) -> None:
    """Results into ``results`` as tasks finish, topping the window up; the first failure, or a lost
    cluster, raises.

    Each future gets one done-callback that queues it (Dask calls it in a thread of its own when the future
    finishes, errs or is cancelled, e.g. with its scheduler lost). Not ``distributed.wait(FIRST_COMPLETED,
    timeout)`` in a loop: every call of it leaves one waiting asyncio task per unfinished future (its ``Any``
    never cancels them), so a 10 GB clean's driver held (unfinished shards x calls) of them, 465 MB."""
    left, idle_since = len(items), None
    while left:
        try:
            batch = [window.finished.get(timeout=POLL_S)]
        except queue.Empty:
            idle_since = _check_workers(client, idle_since)
            continue
        while not window.finished.empty():
            batch.append(window.finished.get())
        idle_since, left = None, left - len(batch)
        for future in sorted(batch, key=lambda f: window.position[f.key]):
            try:
                result = _result(client, future)
            except KilledWorker as exc:
                i = window.position[future.key]
                what = getattr(items[i], "name", None) or repr(items[i])
                raise BloomstackError(f"{what}: its task killed {exc.allowed_failures + 1} workers "
                                      "(out of memory? lower batch sizes or give workers more memory)") from None
            except (FutureCancelledError, OSError) as exc:  # OSError: a gather cut off (CommClosedError)
                _raise_if_scheduler_lost(client, exc)
                raise
            i = window.take(future)
            results[i] = result
            if isinstance(result, _UserError):
                raise result.error from None
            if on_result is not None:
                on_result(i, result)
        window.top_up()


def _result(client: Client, future: Any) -> Any:
    """``future.result()``, checking the workers while it waits: a finished task whose worker died before its
    result was gathered is rescheduled ("Couldn't gather 1 keys, rescheduling") and, with every worker gone,
    would wait forever."""
    idle_since = None
    while True:
        try:
            return future.result(timeout=POLL_S)
        except TimeoutError:
            idle_since = _check_workers(client, idle_since)


def _raise_if_scheduler_lost(client: Client, exc: Exception) -> None:
    """A ClusterLost for futures cancelled, or a result cut off, because the client lost its scheduler (a
    cut-off connection may come just before the client notices: give it a moment)."""
    deadline = time.monotonic() + (2.0 if isinstance(exc, OSError) else 0.0)
    while "scheduler-connection-lost" not in str(exc) and client.status == "running":
        if time.monotonic() >= deadline:
            return
        time.sleep(0.05)
    if getattr(client, "cluster", None) is not None:  # our LocalCluster: nothing for the user to restart
        raise ClusterLost("lost the local Dask cluster's scheduler", "") from None
    address = client.scheduler.address if client.scheduler else "its address"
    raise ClusterLost(f"lost the Dask scheduler at {address}",
                      f"restart it (`dask scheduler`) and its workers (`dask worker {address}`)") from None


def _check_workers(client: Client, idle_since: float | None) -> float | None:
    """While no task finishes: raise once an external scheduler has had no worker for WORKERS_GONE_S (a
    LocalCluster's nannies restart theirs); returns since when it has had none (None: it has some)."""
    if getattr(client, "cluster", None) is not None or client.status != "running":
        return None
    try:
        workers = client.nthreads()
    except OSError:  # the scheduler itself is gone: its futures say so next
        return idle_since
    if workers:
        return None
    now = time.monotonic()
    if idle_since is not None and now - idle_since >= WORKERS_GONE_S:
        address = client.scheduler.address
        raise ClusterLost(f"the Dask scheduler at {address} has had no workers for {WORKERS_GONE_S:.0f} s",
                          f"start workers with `dask worker {address}`")
    return now if idle_since is None else idle_since
