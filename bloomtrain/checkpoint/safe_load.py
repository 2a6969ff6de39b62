"""Reading checkpoint files without running code from them: ``torch.load(weights_only=True)`` + an allowlist.

A pickle may call any importable function while it loads (``os.system`` among them), so reading a checkpoint
folder from someone else with ``weights_only=False`` can run anything. Every checkpoint file is read with
``weights_only=True``: tensors, plain values (numbers, strings, lists, tuples, dicts, sets, OrderedDict,
torch dtypes and sizes) and only the types below, which DeepSpeed and Megatron-DeepSpeed write
(``torch.serialization.safe_globals``):

- ``argparse.Namespace``: Megatron-DeepSpeed's ``args``;
- ``megatron.enums.PositionEmbeddingType``: its ``args.position_embedding_type``, read as the stand-in enum
  below (same name and values; Megatron is not installed here);
- numpy arrays and dtypes (array reconstruction only, numpy 1.x and 2.x names): Megatron's ``np_rng_state``
  and the RNG files bloomtrain wrote before it stored RNG state as tensors;
- ``deepspeed.utils.tensor_fragment.fragment_address``: ZeRO's ``param_slice_mappings``;
- DeepSpeed's loss scalers and ``ZeroStageEnum``: fp16 ZeRO optimizer state.

DeepSpeed reads a universal checkpoint with ``torch.load(..., weights_only=False)`` itself, so the engine's
load runs inside ``weights_only_loads()``, which forces ``weights_only`` on every ``torch.load`` in its scope
(``TORCH_FORCE_WEIGHTS_ONLY_LOAD``, which torch reads at each call). A refused file is named in one line.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import functools
import os
import pickle
import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bloomdata.environ import environ_restored
from bloomdata.errors import BloomstackError

FORCE_ENV = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"


class PositionEmbeddingType(enum.Enum):
    """Stand-in for Megatron-DeepSpeed's ``megatron.enums.PositionEmbeddingType`` (BLOOM's is ``alibi``)."""

    rotary = 1
    absolute = 2
    alibi = 3


@functools.cache
def allowed_globals() -> list[Any]:
    """The non-plain types a DeepSpeed / Megatron-DeepSpeed checkpoint holds (see the module docstring)."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler  # noqa: PLC0415
    from deepspeed.runtime.zero.config import ZeroStageEnum  # noqa: PLC0415
    from deepspeed.utils.tensor_fragment import fragment_address  # noqa: PLC0415

    reconstruct = np.ndarray.__reduce__(np.zeros(0))[0]  # numpy's array rebuild function, under either name
    return [
        argparse.Namespace,
        (PositionEmbeddingType, "megatron.enums.PositionEmbeddingType"),
        (reconstruct, "numpy.core.multiarray._reconstruct"),  # numpy 1.x
        (reconstruct, "numpy._core.multiarray._reconstruct"),  # numpy 2.x
        np.ndarray,
        np.dtype,
        *{type(np.dtype(t)) for t in (np.uint32, np.int64, np.float64, np.uint8)},  # numpy >= 1.25 dtype classes
        fragment_address,
        LossScaler,
        DynamicLossScaler,
        ZeroStageEnum,
    ]


def load(path: str | Path, map_location: Any = "cpu", *, mmap: bool = False) -> Any:
    """``torch.load`` of one checkpoint file with ``weights_only=True`` and the allowlist; a file that needs
    anything else raises one line naming it."""
    try:
        with torch.serialization.safe_globals(allowed_globals()):
            return torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        raise refused(Path(path), exc) from None


def refused(path: Path, exc: Exception) -> BloomstackError:
    """The one-line error for a file whose pickle needs more than tensors, plain values and the allowlist."""
    found = re.search(r"GLOBAL (\S+)", str(exc))
    detail = re.search(r"WeightsUnpickler error: ([^\n]{1,160})", str(exc))
    what = f"calls {found[1]}" if found else f"needs more ({detail[1]})" if detail else "needs more"
    return BloomstackError(
        f"{path}: refused to load: its pickle {what}, which is not tensors, plain values or a type DeepSpeed or "
        "Megatron-DeepSpeed writes (loading it could run code); use only checkpoints you trust, and re-save this "
        "one from its source with tensors and plain values")


@contextlib.contextmanager
def weights_only_loads() -> Iterator[None]:
    """Every ``torch.load`` in this scope (DeepSpeed's own included) reads with weights_only and the allowlist."""
    with environ_restored([FORCE_ENV]), torch.serialization.safe_globals(allowed_globals()):
        os.environ[FORCE_ENV] = "1"
        yield


def guarded(folder: Path, read: Callable[[], Any]) -> Any:
    """``read()`` under ``weights_only_loads``; a refusal inside it (a ``torch.load`` of DeepSpeed's, which does
    not say which file) becomes the one-line error naming the first refused ``*.pt`` file under ``folder``."""
    try:
        with weights_only_loads():
            return read()
    except pickle.UnpicklingError as exc:
        raise first_refused(folder) or refused(folder, exc) from None


def first_refused(folder: Path) -> BloomstackError | None:
    """The error for the first ``*.pt`` file under ``folder`` that ``load`` refuses (None: none is).

    Tensors are memory-mapped where the file format allows it, so only the pickles are read."""
    for path in sorted(Path(folder).rglob("*.pt")):
        try:
            load(path, mmap=zipfile.is_zipfile(path))  # the legacy (non-zip) format cannot be memory-mapped
        except BloomstackError as exc:
            return exc
        except Exception:  # noqa: BLE001, S112 - a torn or foreign file is not what is looked for here
            continue
    return None
