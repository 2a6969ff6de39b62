"""Which fused path serves a call, and one log line per reason when the PyTorch reference runs instead.

Each fused op asks ``resolve(op, tensor, problem)``: ``problem`` is the op's own shape/dtype check
(None when supported). The answer is the extension module to call, or None after logging the
reason once per (op, reason) for the process; reasons carry no per-call numbers, so a training
loop logs a fallback once, not once per step. Calls the fused path leaves to the reference by design
(padding masks and KV-cache steps at generation) log at INFO, since fused kernels are the default;
the rest (an unsupported device type or dtype, a failed build) at WARNING.
"""

from __future__ import annotations

import functools
import logging
from types import ModuleType

import torch

from bloomtrain.kernels import build

logger = logging.getLogger("bloomtrain.kernels")

CPU_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
CUDA_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@functools.cache
def log_fallback(op: str, reason: str, level: int = logging.WARNING) -> None:
    """Log once per (op, reason); ``log_fallback.cache_clear()`` re-arms it (tests)."""
    logger.log(level, "fused %s unavailable, using the PyTorch reference: %s", op, reason)


def dtype_problem(t: torch.Tensor) -> str | None:
    allowed = CUDA_DTYPES if t.is_cuda else CPU_DTYPES
    if t.dtype not in allowed:
        return f"dtype {t.dtype} on {t.device.type} is not supported (use one of {[str(d) for d in allowed]})"
    return None


def unsupported(t: torch.Tensor) -> str | None:
    """Why no fused kernel exists for ``t``'s device type and dtype, or None (the extension may still fail to build)."""
    if t.device.type not in build.DEVICE_TYPES:
        return f"no fused kernels for device type {t.device.type!r}"
    return dtype_problem(t)


def resolve(op: str, t: torch.Tensor, problem: str | None, *, expected: bool = False) -> ModuleType | None:
    """The extension to run ``op`` on ``t``'s device, or None (reason logged) to use the reference.

    ``expected``: ``problem`` is a call the fused path leaves to the reference by design (a padding mask, a KV-cache
    step at generation), logged at INFO; every other reason is a WARNING.
    """
    if problem is None:
        problem = unsupported(t)
    ext = None
    if problem is None:
        ext, problem = build.extension_for(t.device.type)
    if problem is not None:
        log_fallback(op, problem, logging.INFO if expected else logging.WARNING)
        return None
    return ext
