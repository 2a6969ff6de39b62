"""Random-number state: the run's seeding, and one RNG file per rank in each checkpoint.

Megatron seeds ``seed + 100 x pipeline rank``: identical streams across TP and DP (dropout masks of a TP
group must agree), distinct per pipeline stage. A resume in the saved layout restores every rank's
python/numpy/torch state from ``<tag>/rng/rank_RRRRR.pt``, so dropout continues exactly where it stopped.
Another layout cannot carry rank-specific streams over; ``Checkpointer.load`` then derives fresh ones.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bloomdata import durable


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])


def rng_path(ckpt_dir: str | Path, tag: str, rank: int) -> Path:
    return Path(ckpt_dir) / tag / "rng" / f"rank_{rank:05d}.pt"


def save_rng(ckpt_dir: str | Path, tag: str, rank: int) -> Path:
    """Write this rank's RNG state (atomically, fsynced) and return the file's path."""
    path = rng_path(ckpt_dir, tag, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = rng_state()
    durable.write_with(path, lambda f: torch.save(state, f))
    return path


def load_rng(ckpt_dir: str | Path, tag: str, rank: int) -> bool:
    """Restore this rank's RNG state from the checkpoint; False when it has no file for this rank."""
    path = rng_path(ckpt_dir, tag, rank)
    if not path.is_file():
        return False
    set_rng_state(torch.load(path, weights_only=False))
    return True
