"""Random-number state: the run's seeding, and one RNG file per rank in each checkpoint.

Megatron seeds ``seed + 100 x pipeline rank``: identical streams across TP and DP (dropout masks of a TP
group must agree), distinct per pipeline stage. A resume in the saved layout restores every rank's
python/numpy/torch state from ``<tag>/rng/rank_RRRRR.pt``, so dropout continues exactly where it stopped.
Another layout cannot carry rank-specific streams over; ``Checkpointer.load`` then derives fresh ones.

The state is a dict under Megatron-DeepSpeed's names (``megatron/checkpointing.py``), which also go into the
``mp_rank_*`` client state, holding tensors and plain values only (no numpy pickle, so it loads with
``weights_only=True``)::

    random_rng_state   random.getstate(): (version, tuple of 625 ints, gauss or None)
    np_rng_state       ("MT19937", int64 tensor [624] of the uint32 key, pos, has_gauss, cached_gaussian)
    torch_rng_state    uint8 tensor (torch.get_rng_state())
    cuda_rng_state     uint8 tensor, only where CUDA is initialised

Files bloomtrain wrote before (keys ``python``/``numpy``/``torch``, numpy's tuple with an ndarray) and
Megatron's own ``np_rng_state`` (ndarray key) still load: safe_load allows numpy array reconstruction.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from bloomdata import durable
from bloomtrain.checkpoint import safe_load

_OLD_NAMES = {"python": "random_rng_state", "numpy": "np_rng_state", "torch": "torch_rng_state"}


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    name, key, pos, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    state = {
        "random_rng_state": random.getstate(),
        "np_rng_state": (str(name), torch.from_numpy(key.astype(np.int64)), int(pos), int(has_gauss), float(cached)),
        "torch_rng_state": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda_rng_state"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(states: dict[str, Any]) -> None:
    """Restore a state of ``rng_state`` (or of an older bloomtrain file, or of Megatron's client state)."""
    states = {_OLD_NAMES.get(k, k): v for k, v in states.items()}
    random.setstate(states["random_rng_state"])
    name, key, *rest = states["np_rng_state"]
    np.random.set_state((name, np.asarray(key).astype(np.uint32), *rest))
    torch.set_rng_state(states["torch_rng_state"])
    if "cuda_rng_state" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda_rng_state"])


def rng_path(ckpt_dir: str | Path, tag: str, rank: int) -> Path:
    return Path(ckpt_dir) / tag / "rng" / f"rank_{rank:05d}.pt"


def save_rng(ckpt_dir: str | Path, tag: str, rank: int, write: durable.Writer = durable.write_with) -> Path:
    """Write this rank's RNG state (atomically, fsynced: ``write``) and return the file's path."""
    path = rng_path(ckpt_dir, tag, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = rng_state()
    write(path, lambda f: torch.save(state, f))
    return path


def load_rng(ckpt_dir: str | Path, tag: str, rank: int) -> bool:
    """Restore this rank's RNG state from the checkpoint; False when it has no file for this rank."""
    path = rng_path(ckpt_dir, tag, rank)
    if not path.is_file():
        return False
    set_rng_state(safe_load.load(path))
    return True
