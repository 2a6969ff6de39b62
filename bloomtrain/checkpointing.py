"""Checkpoints that survive crashes: DeepSpeed's layout, an atomic ``latest``, keep-last-K, stop requests.

Layout under ``checkpoint.dir`` (reference bloom-training.md §4.2)::

    latest                                   tag of the newest *complete* checkpoint, written last
    global_stepN/layer_XX-model_TT-model_states.pt, mp_rank_MM_model_states.pt, *_optim_states.pt  (DeepSpeed)
    global_stepN/bloomtrain_model.json       ModelConfig + TP/PP (bloomtrain.checkpoint_format)
    global_stepN/rng/rank_RRRRR.pt           python/numpy/torch RNG of every rank (exact resume)
    global_stepN_universal/                  ds_to_universal output (resume at another TP/PP/DP)

Crash safety comes from ordering: every rank writes its files, a barrier, then rank 0 replaces ``latest``
with ``os.replace`` (atomic on POSIX) and only then prunes old steps. A SIGKILL at any point leaves
``latest`` naming a complete checkpoint; a half-written ``global_stepN`` is simply overwritten later.

The trainer's own position (iteration, consumed and scheduled samples, skip counters) travels in
DeepSpeed's ``client_state``; the schedules are functions of it, so they need no state of their own.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import time
from argparse import Namespace
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import torch
import torch.distributed as dist

from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint_format import save_metadata
from bloomtrain.config import TrainConfig
from bloomtrain.parallel.pipeline import universal_checkpoint_info
from bloomtrain.parallel.state import ParallelState

LATEST = "latest"
LAYOUT_FILE = "bloomtrain_layout.json"  # {"tp", "pp", "dp"} the checkpoint was saved with
_STEP_DIR = re.compile(r"global_step(\d+)$")


def tag_for(iteration: int) -> str:
    return f"global_step{iteration}"


def read_latest(ckpt_dir: str | Path) -> str | None:
    path = Path(ckpt_dir) / LATEST
    return path.read_text().strip() if path.is_file() else None


def write_latest(ckpt_dir: str | Path, tag: str) -> None:
    """Atomically point ``latest`` at ``tag`` (write a temp file, fsync, rename over)."""
    path = Path(ckpt_dir) / LATEST
    tmp = path.with_name(f".{LATEST}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(tag)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def prune(ckpt_dir: str | Path, keep_last: int | None, protect: str) -> list[str]:
    """Delete all but the ``keep_last`` newest ``global_stepN`` dirs (never ``protect``); returns removed tags."""
    if keep_last is None:
        return []
    steps = sorted(
        ((int(m.group(1)), p) for p in Path(ckpt_dir).iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()),
        reverse=True,
    )
    removed = []
    for _, path in steps[keep_last:]:
        if path.name != protect:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def layout_of(state: ParallelState) -> dict[str, int]:
    return {"tp": state.tp_size, "pp": state.pp_size, "dp": state.dp_size}


def needs_universal(cfg: TrainConfig, state: ParallelState) -> bool:
    """Resume through a universal checkpoint: asked for, and ``latest`` was saved in another layout.

    After the first save in the new layout, restarts with the same config load that checkpoint directly
    (a 176B conversion takes most of an hour), so ``load_universal`` can stay on in the config.
    """
    if not (cfg.checkpoint.load_universal and cfg.checkpoint.dir and cfg.checkpoint.load):
        return False
    tag = read_latest(cfg.checkpoint.dir)
    return tag is not None and saved_layout(cfg.checkpoint.dir, tag) != layout_of(state)


def saved_layout(ckpt_dir: str | Path, tag: str) -> dict[str, int] | None:
    path = Path(ckpt_dir) / tag / LAYOUT_FILE
    return json.loads(path.read_text()) if path.is_file() else None


class Checkpointer:
    """Save and resume through a DeepSpeed engine; all methods are collective over the world."""

    def __init__(self, cfg: TrainConfig, engine, state: ParallelState, *, universal: bool = False) -> None:
        """``universal``: resume through ds_to_universal (decided by ``needs_universal`` before the engine
        is built, because DeepSpeed reads its load_universal flag from the config)."""
        self.cfg, self.engine, self.state, self.universal = cfg, engine, state, universal
        self.dir = Path(cfg.checkpoint.dir) if cfg.checkpoint.dir else None
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    def save(self, iteration: int, position: dict[str, Any]) -> str:
        assert self.dir is not None
        tag = tag_for(iteration)
        client_state = {
            "bloomtrain": position,
            "train_config": self.cfg.model_dump(mode="json"),
            "world_size": self.world,
            "universal_checkpoint_info": universal_checkpoint_info(self.cfg.model),
        }
        self.engine.save_checkpoint(str(self.dir), tag=tag, client_state=client_state, save_latest=False)
        rng_dir = self.dir / tag / "rng"
        rng_dir.mkdir(parents=True, exist_ok=True)
        torch.save(rng_state(), rng_dir / f"rank_{self.rank:05d}.pt")
        if self.rank == 0:
            save_metadata(self.dir, tag, self.cfg.model, self.state.tp_size, self.state.pp_size)
            (self.dir / tag / LAYOUT_FILE).write_text(json.dumps(layout_of(self.state)))
        dist.barrier()  # every rank's files are on disk before `latest` moves
        if self.rank == 0:
            write_latest(self.dir, tag)
            prune(self.dir, self.cfg.checkpoint.keep_last, protect=tag)
        dist.barrier()
        return tag

    def load(self) -> dict[str, Any] | None:
        """Resume from ``latest`` (or its universal conversion); returns the trainer position or None."""
        if self.dir is None or not self.cfg.checkpoint.load:
            return None
        tag = read_latest(self.dir)
        if tag is None:
            return None
        universal = self.universal
        if not universal:
            self._check_same_layout(tag)
        if universal:
            if self.cfg.optim.precision != "bf16":
                raise BloomstackError("checkpoint.load_universal needs optim.precision=bf16 (DeepSpeed loads "
                                     "universal checkpoints into the BF16/ZeRO optimizer's fp32 fragments)")
            tag = self._ensure_universal(tag)
        path, client = self.engine.load_checkpoint(str(self.dir), tag=tag, load_optimizer_states=True,
                                                   load_lr_scheduler_states=False)
        if path is None:
            raise BloomstackError(f"checkpoint {self.dir / tag} could not be loaded (see DeepSpeed's log above)")
        position = dict(client["bloomtrain"])
        rng_file = self.dir / tag / "rng" / f"rank_{self.rank:05d}.pt"
        if not universal and client.get("world_size") == self.world and rng_file.is_file():
            set_rng_state(torch.load(rng_file, weights_only=False))
        else:  # another layout: rank-specific streams cannot be carried over; derive fresh ones
            seed_everything(self.cfg.seed + 100 * self.state.pp_rank + 7919 * position["iteration"])
        return position

    def _check_same_layout(self, tag: str) -> None:
        saved, now = saved_layout(self.dir, tag), layout_of(self.state)
        if saved is None or saved == now:
            return
        # fp32 mode keeps whole optimizer states on every DP rank, so only TP and PP must match there
        keys = ("tp", "pp") if self.cfg.optim.precision == "fp32" else ("tp", "pp", "dp")
        if any(saved[k] != now[k] for k in keys):
            raise BloomstackError(
                f"checkpoint {self.dir / tag} was saved at tp={saved['tp']} pp={saved['pp']} dp={saved['dp']}, "
                f"this run is tp={now['tp']} pp={now['pp']} dp={now['dp']}; set checkpoint.load_universal=true "
                "to convert it (bf16), or launch the saved layout"
            )

    def _ensure_universal(self, tag: str) -> str:
        out = f"{tag}_universal"
        if self.rank == 0 and not (self.dir / out / "zero").is_dir():
            to_universal(self.dir / tag, self.dir / out)
        dist.barrier()
        return out


def to_universal(tag_dir: str | Path, out_dir: str | Path, workers: int = 1) -> Path:
    """Run DeepSpeed's ds_to_universal on one checkpoint tag directory (our patterns are in its mp_rank files)."""
    from deepspeed.checkpoint.ds_to_universal import main as ds_to_universal  # noqa: PLC0415

    tag_dir, out_dir = Path(tag_dir), Path(out_dir)
    if not tag_dir.is_dir():
        raise BloomstackError(f"checkpoint directory {tag_dir} does not exist")
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    ds_to_universal(Namespace(input_folder=str(tag_dir), output_folder=str(tmp), num_extract_workers=workers,
                              num_merge_workers=workers, keep_temp_folder=False, strict=True,
                              inject_missing_state=False))
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(tmp, out_dir)
    return out_dir


class StopRequests:
    """Signals, a kill-switch file and a wall-clock budget, agreed on by all ranks once per iteration."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg.checkpoint
        # Megatron counts exit_duration_in_mins from launch, so start-up and checkpoint loading count too.
        self.start = psutil.Process().create_time()
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for name in self.cfg.exit_signals:
            signum = getattr(signal, name)
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def uninstall(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _on_signal(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        # Only set a flag: the iteration finishes, then every rank saves together.
        self.received = signal.Signals(signum).name

    def check(self) -> str | None:
        """Collective: the reason to stop (signal / kill switch / time limit) if any rank has one."""
        local = [
            self.received is not None,
            bool(self.cfg.kill_switch_path) and os.path.exists(self.cfg.kill_switch_path),
            self.cfg.exit_duration_in_mins is not None
            and (time.time() - self.start) / 60.0 >= self.cfg.exit_duration_in_mins,
        ]
        device = f"cuda:{torch.cuda.current_device()}" if dist.is_initialized() and dist.get_backend() == "nccl" \
            else "cpu"
        flags = torch.tensor(local, dtype=torch.int32, device=device)
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        reasons = ["signal " + (self.received or "(on another rank)"),
                   f"kill switch {self.cfg.kill_switch_path}",
                   f"exit_duration_in_mins={self.cfg.exit_duration_in_mins}"]
        hit = [r for r, f in zip(reasons, flags.tolist()) if f]
        return hit[0] if hit else None
