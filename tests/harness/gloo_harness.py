"""The one multi-process harness: run ``fn(*args)`` on N gloo ranks of a fresh process group.

Modelled on OLMo-core's testing/distributed.py. Ranks are forked (fast: no re-import of torch) unless the
caller asks for ``start="spawn"`` (a parent that ran Inductor holds compile threads and locks a fork would copy
mid-use: the child can hang on them); each one
sets one thread and flush-denormal, joins a gloo group on a free localhost port, runs ``fn`` and writes its
return value (``torch.save``) or its traceback to a temp dir, then leaves with ``os._exit`` (no atexit
handlers inherited from the parent, pytest's among them). ``fn`` must be a module-level function (or any
callable: forking passes it without pickling); it reads its rank from torch.distributed.

- ``run_distributed(fn, world_size, *args)``: wait for every rank; raise one ``RuntimeError`` with the
  errors of every failed rank, else return the values as a list indexed by rank.
- ``start_ranks(fn, world_size, *args)``: start the ranks and return at once (``Ranks``), for tests that
  signal or kill a running rank; ``Ranks.wait()`` then reports each rank's ``RankOutcome`` without raising.

Waiting has a deadline; when one rank fails, the others get a grace period (they may be blocked in a
collective with it, or still finishing work the test checks) and are then killed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(fn: Callable, rank: int, world_size: int, port: int, out_dir: str, timeout_s: float,
               args: tuple) -> None:
    code = 0
    try:
        torch.set_num_threads(1)
        torch.set_flush_denormal(True)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size, timeout=timedelta(seconds=timeout_s))
        result = fn(*args)
        torch.save(result, Path(out_dir) / f"rank{rank}.pt")
    except BaseException:  # noqa: BLE001 - every failure must reach the parent
        (Path(out_dir) / f"rank{rank}.err").write_text(traceback.format_exc())
        code = 1
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001
                pass
    os._exit(code)


@dataclass
class RankOutcome:
    exitcode: int | None
    """The process's exit code (negative: killed by that signal); None: killed by the harness."""
    value: Any = None
    """``fn``'s return value when it returned."""
    error: str | None = None
    """The traceback when ``fn`` raised."""


class Ranks:
    """Running ranks started by ``start_ranks``."""

    def __init__(self, fn: Callable, world_size: int, args: tuple, timeout_s: float, start: str = "fork") -> None:
        self.fn, self.timeout_s = fn, timeout_s
        self._out = tempfile.mkdtemp(prefix="gloo_ranks_")
        port = free_port()
        ctx = mp.get_context(start)
        self.procs = [ctx.Process(target=_rank_main, args=(fn, r, world_size, port, self._out, timeout_s, args),
                                  daemon=True) for r in range(world_size)]
        for p in self.procs:
            p.start()
        self.started = time.monotonic()

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def alive(self) -> bool:
        return any(p.is_alive() for p in self.procs)

    def wait(self, grace_s: float = 5.0) -> list[RankOutcome]:
        """Wait until every rank ended (deadline: ``timeout_s`` after the start; ``grace_s`` after the first
        failure), kill the rest, and report each rank."""
        deadline = self.started + self.timeout_s
        failed_at = None
        while self.alive():
            now = time.monotonic()
            if failed_at is None and any(p.exitcode not in (None, 0) for p in self.procs):
                failed_at = now
            if now > deadline or (failed_at is not None and now - failed_at > grace_s):
                break
            time.sleep(0.02)
        killed = set()
        for r, p in enumerate(self.procs):
            if p.is_alive():
                p.kill()
                killed.add(r)
            p.join()
        outcomes = []
        for r, p in enumerate(self.procs):
            value_file, err_file = Path(self._out) / f"rank{r}.pt", Path(self._out) / f"rank{r}.err"
            outcomes.append(RankOutcome(
                exitcode=None if r in killed else p.exitcode,
                value=torch.load(value_file, weights_only=False) if value_file.is_file() else None,
                error=err_file.read_text() if err_file.is_file() else None,
            ))
        shutil.rmtree(self._out, ignore_errors=True)
        return outcomes


def start_ranks(fn: Callable, world_size: int, *args: Any, timeout_s: float = 120.0, start: str = "fork") -> Ranks:
    """Start ``fn(*args)`` on ``world_size`` gloo ranks and return without waiting."""
    return Ranks(fn, world_size, args, timeout_s, start)


def run_distributed(fn: Callable, world_size: int, *args: Any, timeout_s: float = 120.0,
                    grace_s: float = 5.0, start: str = "fork") -> list[Any]:
    """Run ``fn(*args)`` on ``world_size`` gloo ranks; return ``[result of rank 0, ...]``.

    ``start="spawn"``: fresh interpreters (``fn`` and ``args`` are pickled), for parents that ran Inductor."""
    outcomes = start_ranks(fn, world_size, *args, timeout_s=timeout_s, start=start).wait(grace_s)
    errors = []
    for r, o in enumerate(outcomes):
        if o.error is not None:
            errors.append(f"--- rank {r} ---\n{o.error}")
        elif o.exitcode is None:
            errors.append(f"--- rank {r} --- killed (timeout {timeout_s}s or a peer failed)")
        elif o.exitcode != 0:
            errors.append(f"--- rank {r} --- exited with code {o.exitcode}")
    if errors:
        raise RuntimeError(f"run_distributed({fn.__name__}, world_size={world_size}) failed:\n" + "\n".join(errors))
    return [o.value for o in outcomes]
