"""``run_distributed(fn, world_size, *args)``: run ``fn(*args)`` on N gloo ranks of a fresh process group.

Modelled on OLMo-core's testing/distributed.py. Ranks are forked (fast: no re-import of torch); each one
sets one thread and flush-denormal, joins a gloo group on a free localhost port, runs ``fn`` and writes its
return value (``torch.save``) or its traceback to a temp dir. The parent waits with a deadline; when one
rank fails, the others get a short grace period (they may be blocked in a collective with it) and are then
killed. Errors of every rank are raised together in one ``RuntimeError``; return values come back as a
list indexed by rank. ``fn`` must be a module-level function; it reads its rank from torch.distributed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import tempfile
import time
import traceback
from collections.abc import Callable
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
    os._exit(code)  # skip atexit handlers inherited from the forked parent (pytest's among them)


def run_distributed(fn: Callable, world_size: int, *args: Any, timeout_s: float = 120.0,
                    grace_s: float = 5.0) -> list[Any]:
    """Run ``fn(*args)`` on ``world_size`` gloo ranks; return ``[result of rank 0, ...]``."""
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory(prefix="run_distributed_") as out_dir:
        port = free_port()
        procs = [
            ctx.Process(target=_rank_main, args=(fn, r, world_size, port, out_dir, timeout_s, args), daemon=True)
            for r in range(world_size)
        ]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout_s
        failed_at = None
        while any(p.is_alive() for p in procs):
            now = time.monotonic()
            if failed_at is None and any(p.exitcode not in (None, 0) for p in procs):
                failed_at = now
            if now > deadline or (failed_at is not None and now - failed_at > grace_s):
                break
            time.sleep(0.02)
        timed_out = []
        for r, p in enumerate(procs):
            if p.is_alive():
                p.kill()
                timed_out.append(r)
            p.join()
        errors = []
        for r, p in enumerate(procs):
            err = Path(out_dir) / f"rank{r}.err"
            if err.is_file():
                errors.append(f"--- rank {r} ---\n{err.read_text()}")
            elif r in timed_out:
                errors.append(f"--- rank {r} --- killed (timeout {timeout_s}s or a peer failed)")
            elif p.exitcode != 0:
                errors.append(f"--- rank {r} --- exited with code {p.exitcode}")
        if errors:
            raise RuntimeError(f"run_distributed({fn.__name__}, world_size={world_size}) failed:\n"
                               + "\n".join(errors))
        return [torch.load(Path(out_dir) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]
