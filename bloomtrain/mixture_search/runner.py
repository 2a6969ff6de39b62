"""Where the proxies run: this machine's cores, an existing Dask cluster, or a Slurm job array.

Finished proxies are never run again (their ``result.json`` holds their key); the others run in parallel on
what the user has, through executors that exist already, not a scheduler of ours:

- local processes (default) and Dask (``scheduler``): ``bloomdata.jobs.placement.Placement``, the build's
  executor: a ``LocalCluster`` of ``workers`` one-thread processes, or the workers of the cluster at
  ``scheduler``, each task running one proxy (``proxy.run_proxy``: the proxy's own child process, so a
  crash or a leak ends with it); ``workers=0`` runs them one by one in this process;
- Slurm (``slurm``): one array job, one task per pending proxy (``mixture_search.slurm``), submitted with
  ``sbatch --wait`` so the search continues when the array has ended, whatever its tasks' fate.

A proxy that failed fails the search with one line naming its log; the ones that finished are kept, so the
next run (after the fix) trains only what is missing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from bloomdata.errors import BloomstackError
from bloomdata.jobs.placement import Placement
from bloomtrain.mixture_search.config import MixtureSearchConfig
from bloomtrain.mixture_search.proxy import LOG, ProxyResult, finished, read_job, run_proxy

ProxyTrainer = Callable[[str], ProxyResult]  # a proxy directory -> its result (run_proxy; tests pass stubs)
OnResult = Callable[[int, ProxyResult], None]  # index in the list given, result: as each proxy finishes


def run_proxies(dirs: list[Path], config: MixtureSearchConfig, trainer: ProxyTrainer | None = None,
                on_result: OnResult | None = None) -> list[ProxyResult]:
    """The results of the proxies in ``dirs`` (in order), training those not finished yet."""
    results: list[ProxyResult | None] = [finished(d, read_job(d)) for d in dirs]
    for i, r in enumerate(results):
        if r is not None and on_result is not None:
            on_result(i, r)
    pending = [i for i, r in enumerate(results) if r is None]
    if pending and config.slurm:
        from bloomtrain.mixture_search.slurm import run_array  # noqa: PLC0415

        run_array([dirs[i] for i in pending], config)
        for i in pending:
            result = finished(dirs[i], read_job(dirs[i]))
            if result is None:
                raise BloomstackError(f"proxy {dirs[i]} did not finish in the Slurm array; read {dirs[i] / LOG}, "
                                      "fix the cause and rerun the search (finished proxies are kept)")
            results[i] = result
            if on_result is not None:
                on_result(i, result)
    elif pending:
        fn = trainer or functools.partial(run_proxy, threads=config.threads)

        def done(k: int, result: ProxyResult) -> None:
            results[pending[k]] = result
            if on_result is not None:
                on_result(pending[k], result)

        with Placement(min(config.workers, len(pending)), config.scheduler, progress=False,
                       dashboard=config.dashboard) as where:
            where.map("proxies", fn, [str(dirs[i]) for i in pending], on_result=done)
    return [r for r in results if r is not None]
