"""Run one function over many shards on Dask: the only module of bloomdata that imports dask/distributed.

``run_shards(fn, items, ...)`` is the executor half of datatrove's step/executor split: ``fn`` is a pure,
idempotent, importable step (``bloomdata.build.tokenize_shard``) that takes a shard and returns a small
manifest; this module only decides *where* it runs. Choices and their reasons:

- A ``distributed.LocalCluster`` of N worker *processes* with one thread each (the tokenizer's Python
  glue, JSON parsing and the writers hold the GIL, so threads would not scale) and the dashboard off; or
  an existing cluster (``scheduler_address``), or a caller's ``Client`` (tests and flows share one).
  ``n_workers=0`` runs in the calling process, for debugging.
- Workers get ``TOKENIZERS_PARALLELISM=false``: parallelism comes from processes, and Rayon threads on top
  would oversubscribe the cores. A LocalCluster sets it at worker start (Nanny ``env``; Dask's
  statistical profiler is off there too); a worker plugin sets it on the workers of an existing cluster,
  before any task runs there.
- Tasks get random keys (``pure=False``): a rerun must run the step again (it checks its own completion
  marker), never be answered from a result Dask still holds.
- Results come back as tasks finish (``as_completed``) for progress, but are returned in input order, so
  callers never depend on scheduling. The first failure cancels the remaining tasks and is re-raised;
  a task that keeps killing its workers becomes a ``BloomstackError`` naming the item.
- A ``BloomstackError`` (bad user input: a missing column, a --strict reject) is caught in the task and
  returned as a value, then raised here: for Dask the task succeeded, so the worker never logs its
  multi-line "Compute Failed ... Traceback" dump (at ERROR level, so ``silence_logs`` cannot hide it, and
  on an external cluster its logging is not ours to set). The user sees the one-line message only. Other
  exceptions are bugs: they still fail the task, with the worker's log and the traceback.
- Called from inside a Dask task (a Prefect task on a DaskTaskRunner), the shards run on that same
  cluster through ``worker_client``: a daemonic worker process cannot start a LocalCluster of its own.
- Spawned worker processes re-import ``__main__``: scripts that call this must guard their entry point
  with ``if __name__ == "__main__":`` and keep task code in importable modules.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dask.config
from dask.utils import funcname
from distributed import Client, LocalCluster, WorkerPlugin, as_completed, get_worker, worker_client
from distributed.scheduler import KilledWorker

from bloomdata.errors import BloomstackError

WORKER_ENV = {"TOKENIZERS_PARALLELISM": "false"}
# Dask's statistical profiler samples the task thread's stack every 10 ms (taking the GIL); we never read
# those profiles, and on a 2-core box its CPU comes straight out of tokenizing. The Nanny hands the
# parent's Dask config to each worker it starts (and restarts), so it is set around the cluster's creation.
WORKER_CONFIG = {"distributed.worker.profile.enabled": False}
CONNECT_TIMEOUT_S = 30  # to reach an existing scheduler and see at least one worker


class _WorkerEnv(WorkerPlugin):
    """Sets ``WORKER_ENV`` in every worker of a cluster we did not start (and in ones that join later)."""

    name = "bloomdata-worker-env"

    def setup(self, worker) -> None:
        os.environ.update(WORKER_ENV)


@contextlib.contextmanager
def dask_client(n_workers: int = 2, scheduler_address: str | None = None) -> Iterator[Client]:
    """A Client on a fresh LocalCluster (closed on exit) or on an existing scheduler."""
    if scheduler_address:
        try:
            client = Client(scheduler_address, timeout=f"{CONNECT_TIMEOUT_S}s")
        except (OSError, TimeoutError, ValueError) as exc:
            raise BloomstackError(f"cannot connect to the Dask scheduler at {scheduler_address} ({exc}); start "
                                 "one with `dask scheduler` plus `dask worker ADDR`, or drop --scheduler") from None
        with client:
            try:
                client.wait_for_workers(1, timeout=CONNECT_TIMEOUT_S)
            except TimeoutError:
                raise BloomstackError(f"the Dask scheduler at {scheduler_address} has no workers after "
                                     f"{CONNECT_TIMEOUT_S}s; start some with `dask worker {scheduler_address}`") from None
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
    with _parent_environ_restored():
        with warnings.catch_warnings(), dask.config.set(WORKER_CONFIG):
            # with the dashboard off the scheduler still serves /health on 8787 or, when taken, any free port
            warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
            cluster = LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None, env=dict(WORKER_ENV), silence_logs=logging.ERROR)
        with cluster, Client(cluster) as client:
            yield client


@contextlib.contextmanager
def _parent_environ_restored() -> Iterator[None]:
    """Undo, on exit, what the Nanny writes into this process's environment.

    Before spawning each worker the Nanny sets ``distributed.nanny.pre-spawn-environ`` (OMP_NUM_THREADS=1,
    MKL_NUM_THREADS=1, ...) in *our* os.environ and never restores it: everything this process ran after a
    build (the C++ index builders, numpy's BLAS, torch) was left on one thread.
    """
    keys = set(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {}) | {"PYTHONHASHSEED"}
    saved = {key: os.environ.get(key) for key in keys}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@dataclasses.dataclass(frozen=True)
class _UserError:
    """A task's BloomstackError, carried back as its result (see the module docstring)."""

    error: BloomstackError


def _step(fn: Callable[[Any], Any], item: Any) -> Any:
    """``fn(item)`` in a worker, with a BloomstackError returned as a ``_UserError`` instead of raised."""
    try:
        return fn(item)
    except BloomstackError as exc:
        return _UserError(exc)


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
        # keys named after fn (e.g. tokenize_shard-<uuid>-<i>), not after the wrapper
        futures = client.map(functools.partial(_step, fn), list(items), key=funcname(fn), pure=False)
        position = {future.key: i for i, future in enumerate(futures)}
        try:
            for future in as_completed(futures):
                i = position[future.key]
                try:
                    results[i] = future.result()
                except KilledWorker as exc:
                    what = getattr(items[i], "name", None) or repr(items[i])
                    raise BloomstackError(f"{what}: its task killed {exc.allowed_failures + 1} workers "
                                         "(out of memory? lower batch sizes or give workers more memory)") from None
                if isinstance(results[i], _UserError):
                    raise results[i].error from None
                if on_result is not None:
                    on_result(i, results[i])
        except BaseException:
            client.cancel(futures)
            raise
    return results
