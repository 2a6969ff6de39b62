"""``Placement``: where a job's stages run (``bloomdata.jobs.runner.Where``), one Dask client for all of them.

A caller's client, an existing scheduler, or a LocalCluster of ``workers`` processes opened when a stage first
has work (``bloomdata.jobs.executor.dask_client``, its dashboard served when ``dashboard``), or this process
(``workers=0``); each stage with a progress bar.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

from tqdm import tqdm

from bloomdata.jobs.executor import dask_client, run_shards


@dataclasses.dataclass
class Placement:
    """Where a job's steps run, and one client for all its stages (enter it as a context: it closes what it
    opened). ``client``: a caller's ``distributed.Client``; else ``scheduler`` (tcp://host:port) or a LocalCluster
    of ``workers`` processes, opened when a stage first has work; ``workers=0``: in this process."""

    workers: int = 2
    scheduler: str | None = None
    client: Any = None
    progress: bool = True
    dashboard: bool = False
    _stack: contextlib.ExitStack = dataclasses.field(default_factory=contextlib.ExitStack, repr=False)
    _given: bool = dataclasses.field(init=False, repr=False)  # the client was the caller's (not one we opened)

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
            self.client = self._stack.enter_context(dask_client(self.workers, self.scheduler, self.dashboard))
        return self.client

    def map(self, name: str, step: Callable[[Any], Any], items: Sequence[Any],
            on_result: Callable[[int, Any], None] | None = None, *, done_before: int = 0,
            postfix: Callable[[], dict[str, Any]] | None = None) -> list[Any]:
        """``[step(item) for item in items]`` on this placement, in item order, with a progress bar counting
        ``done_before`` tasks already done (reused); ``on_result(i, result)`` as each finishes."""
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
