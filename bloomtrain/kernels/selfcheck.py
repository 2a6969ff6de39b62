"""First-use self-check of the fused kernels against their PyTorch references, once per device type and dtype.

``model.kernels: auto`` (the default) and ``fused`` run it the first time a kernel is called on a device type (cpu,
cuda) in a dtype, once per process: each fused kernel (layer_norm, bias_gelu, alibi_softmax and the block-causal
attention) runs forward and backward on small seeded random inputs of that dtype, and its output and every input
gradient are compared with the PyTorch reference. On CUDA the Triton flash attention is checked the same way at the
head dim of the call that first uses it (the model's: its tiles, padding and launch plan depend on the head dim),
once per device type, dtype and head dim (``check_flash``). ``use_fused`` turns the result into the choice for a
call: "auto" uses each kernel that passed and the reference for the others, with one warning line per reason;
"fused" raises a BloomstackError instead, as Megatron's ``--abort-on-unmet-fused-kernel-constraints`` aborts. The
results stay in this module for the life of the process: ``selfcheck_report()`` returns them as JSON-able dicts for
the logs and the checkpoint metadata.

Trade-off: four small problems (milliseconds on CPU) catch an extension that was miscompiled, mis-dispatched or
built for another machine, on the machine that runs it; they cannot cover every shape-dependent path of the
kernels, which the unit tests (tests/bloomtrain/test_kernels*.py) do. The shapes hit the SIMD tails (a last dim of
203), the KV-offset rows of the softmax (fewer queries than keys) and two attention blocks (136 rows).

Comparison. The reference runs on the same inputs upcast to float64 (its LayerNorm statistics and softmax are fp32
by contract, so its own error is about 1e-7 relative), except attention: its reference is the full-square
composition in the run's dtype, so both sides make the same torch.matmul calls and TF32 or reduced-precision matmul
settings affect them alike; the comparison measures the kernel, not the matmul mode. Both sides get the same seeded
upstream gradient. A tensor (the output or an input gradient) passes when every element satisfies

    |fused - reference| <= rtol * |reference| + atol * max|reference|

(atol scaled by the tensor's largest entry, so the check does not depend on the inputs' scale; weight and bias
gradients are sums over rows). Tolerances per dtype (``TOLERANCES``):

- float32 (and float64): rtol = atol = 1e-5. The kernels' own error is below 1e-6 relative on CPU and 2e-6 with
  CUDA's fast-math intrinsics; float64 is checked to fp32 accuracy because the references compute in fp32.
- bfloat16: rtol 1.6e-2 (2 ulps; bf16's machine epsilon is 2**-7), atol 1e-2. The fused kernels round once from
  fp32 where the reference tensors round at every step (attention's bf16 scores and saved probabilities).
- float16: rtol 2e-3 (2 ulps; epsilon 2**-10), atol 1e-3.

A wrong kernel (a transposed index, a missing bias or slope, a bad reduction) is off by far more than these.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

import torch

from bloomdata.errors import BloomstackError
from bloomtrain.kernels import build
from bloomtrain.kernels.alibi_softmax import FusedAlibiSoftmaxFunction, alibi_softmax_reference
from bloomtrain.kernels.attention import BlockCausalAttentionFunction, attention_reference
from bloomtrain.kernels.bias_gelu import FusedBiasGeLUFunction, bias_gelu_reference
from bloomtrain.kernels.fallback import log_fallback, unsupported
from bloomtrain.kernels.flash_attention import flash_attention, flash_problem
from bloomtrain.kernels.layer_norm import FusedLayerNormFunction, layer_norm_reference

logger = logging.getLogger("bloomtrain.kernels")

KERNELS = ("layer_norm", "bias_gelu", "alibi_softmax", "attention")
# Checked on CUDA only, per head dim: the Triton flash attention (bloomtrain.kernels.flash_attention) needs no C++
# extension.
CUDA_KERNELS = (*KERNELS, "flash_attention")

TOLERANCES: dict[torch.dtype, tuple[float, float]] = {  # (rtol, atol x max|reference|); see the module docstring
    torch.float64: (1e-5, 1e-5),
    torch.float32: (1e-5, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (2e-3, 1e-3),
}

# ALiBi slopes of 4 heads, 2**(-8(h+1)/4): any positive slopes exercise the in-kernel bias.
_SLOPES = [2.0 ** (-2 * (h + 1)) for h in range(4)]


@dataclass(frozen=True)
class KernelCheck:
    """One fused kernel's self-check on one device type and dtype; ``as_dict()`` is its JSON record."""

    kernel: str
    device: str
    """The device the check ran on ("cpu", "cuda:0"); the result holds for its device type."""
    device_name: str
    """The GPU's name, or "cpu (<isa>)" with the CPU build the extension dispatched to."""
    dtype: str
    fused: bool
    """True when the kernel passed: "auto" uses it."""
    reason: str | None
    """Why it did not pass: the build failure, the exception, or where it differed and by how much."""
    failure: str | None
    """One of build, error, mismatch; None when it passed."""
    max_error: float | None
    """Largest |fused - reference| over the output and input gradients, relative to that tensor's max|reference|."""
    tolerance_used: float | None
    """Worst |fused - reference| / (rtol |reference| + atol max|reference|) over all elements; <= 1 passes."""
    rtol: float
    atol: float
    ms: float
    """Wall time of this kernel's check, milliseconds."""
    head_dim: int | None = None
    """The head dim the flash attention was checked at; None for the other kernels."""

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class _Case:
    fused: Callable[..., torch.Tensor]
    reference: Callable[..., torch.Tensor]
    inputs: tuple[torch.Tensor, ...]
    names: tuple[str, ...]
    reference_dtype: torch.dtype


def _case(kernel: str, ext: ModuleType | None, device: torch.device, dtype: torch.dtype, gen: torch.Generator,
          head_dim: int = 24) -> _Case:
    def rand(*shape: int, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
        # Drawn on the CPU from the check's own generator: the run's global RNG streams are left alone.
        t = torch.randn(shape, generator=gen, dtype=torch.float64) * scale + shift
        return t.to(device=device, dtype=dtype)

    slopes = torch.tensor(_SLOPES, dtype=torch.float32, device=device)
    if kernel == "layer_norm":
        return _Case(lambda x, w, b: FusedLayerNormFunction.apply(x, w, b, 1e-5, ext),
                     lambda x, w, b: layer_norm_reference(x, w, b, 1e-5),
                     (rand(10, 203, scale=3.0, shift=1.0), rand(203, scale=0.1, shift=1.0), rand(203, scale=0.1)),
                     ("x", "weight", "bias"), torch.float64)
    if kernel == "bias_gelu":
        return _Case(lambda x, b: FusedBiasGeLUFunction.apply(x, b, ext), bias_gelu_reference,
                     (rand(6, 203, scale=3.0), rand(203)), ("x", "bias"), torch.float64)
    if kernel == "alibi_softmax":
        # 24 queries over 40 keys: query row i sits at key 16 + i, so the causal cut moves across the rows.
        return _Case(lambda s: FusedAlibiSoftmaxFunction.apply(s, slopes, 0.125, ext),
                     lambda s: alibi_softmax_reference(s, slopes, 0.125),
                     (rand(2, 4, 24, 40, scale=4.0),), ("scores",), torch.float64)
    if kernel == "flash_attention":
        # 136 rows over 144 keys (row i at key 8 + i): two query tiles and the diagonal tiles, at the model's head
        # dim (the launch plan, and its fallbacks where a tile does not fit the card, are that head dim's).
        scale = head_dim ** -0.5
        return _Case(lambda q, k, v: flash_attention(q, k, v, slopes, scale),
                     lambda q, k, v: attention_reference(q, k, v, slopes, scale, softmax=alibi_softmax_reference),
                     (rand(1, 4, 136, head_dim), rand(1, 4, 144, head_dim), rand(1, 4, 144, head_dim)),
                     ("q", "k", "v"), dtype)
    if kernel == "attention":
        # 136 rows: two blocks of the block-causal path ([0, 68) and [68, 136)); reference in the run's dtype.
        return _Case(lambda q, k, v: BlockCausalAttentionFunction.apply(q, k, v, slopes, 0.25, ext),
                     lambda q, k, v: attention_reference(q, k, v, slopes, 0.25, softmax=alibi_softmax_reference),
                     (rand(1, 4, 136, 16), rand(1, 4, 136, 16), rand(1, 4, 136, 16)), ("q", "k", "v"), dtype)
    raise ValueError(f"no self-check for kernel {kernel!r}; expected one of {CUDA_KERNELS}")


def _compare(case: _Case, rtol: float, atol: float, gen: torch.Generator) -> tuple[float, float, str]:
    """(max error, tolerance used, where) over the output and every input gradient; NaN counts as infinite."""
    a = [t.detach().clone().requires_grad_(True) for t in case.inputs]
    b = [t.detach().to(case.reference_dtype).requires_grad_(True) for t in case.inputs]
    out_a, out_b = case.fused(*a), case.reference(*b)
    upstream = torch.randn(out_a.shape, generator=gen, dtype=torch.float64).to(out_a.device, out_a.dtype)
    # Backward of <out, upstream> (a scalar: grad_outputs would make torch import sympy, ~1 s, on its first use).
    grads_a = torch.autograd.grad((out_a * upstream).sum(), a)
    grads_b = torch.autograd.grad((out_b * upstream.to(out_b.dtype)).sum(), b)
    worst = (0.0, 0.0, "output")
    for where, x, y in zip(("output", *(f"d{n}" for n in case.names)), (out_a, *grads_a), (out_b, *grads_b)):
        if x.shape != y.shape:
            raise ValueError(f"{where} has shape {tuple(x.shape)}, the reference {tuple(y.shape)}")
        x, y = x.double(), y.double()
        scale = y.abs().max().clamp_min(torch.finfo(torch.float64).tiny)
        diff = (x - y).abs()
        err = (diff.max() / scale).item()
        used = (diff / (rtol * y.abs() + atol * scale)).max().item()
        err, used = (math.inf if math.isnan(v) else v for v in (err, used))
        if used > worst[1] or (used == worst[1] and err > worst[0]):
            worst = (err, used, where)
    return worst


def _device_name(device: torch.device, ext: ModuleType | None) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"cpu ({ext.cpu_isa()})" if ext is not None else "cpu"


def _check_one(kernel: str, ext: ModuleType | None, device: torch.device, dtype: torch.dtype, common: dict,
               head_dim: int | None = None) -> KernelCheck:
    started = time.perf_counter()
    rtol, atol = common["rtol"], common["atol"]
    gen = torch.Generator().manual_seed(1000 + CUDA_KERNELS.index(kernel))
    if head_dim is not None:
        common = dict(common, head_dim=head_dim)
    try:
        err, used, where = _compare(_case(kernel, ext, device, dtype, gen, head_dim or 24), rtol, atol, gen)
    except Exception as exc:  # a kernel that throws is a failed kernel, whatever the exception
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        return KernelCheck(kernel, fused=False, reason=f"raised {type(exc).__name__}: {first}", failure="error",
                           max_error=None, tolerance_used=None, ms=(time.perf_counter() - started) * 1e3, **common)
    ok = used <= 1.0
    reason = None if ok else (f"{where} differs from the PyTorch reference by {err:.2g} of its largest entry, "
                              f"{used:.3g}x the {common['dtype']} tolerance (rtol {rtol:g}, atol {atol:g})")
    return KernelCheck(kernel, fused=ok, reason=reason, failure=None if ok else "mismatch", max_error=err,
                       tolerance_used=used, ms=(time.perf_counter() - started) * 1e3, **common)


def _run(device: torch.device, dtype: torch.dtype) -> dict[str, KernelCheck]:
    rtol, atol = TOLERANCES[dtype]
    dtype_name = str(dtype).removeprefix("torch.")
    started = time.perf_counter()
    ext, build_problem = build.extension_for(device.type)
    load_ms = (time.perf_counter() - started) * 1e3
    common: dict[str, Any] = {"device": str(device), "device_name": _device_name(device, ext), "dtype": dtype_name,
              "rtol": rtol, "atol": atol}
    results: dict[str, KernelCheck] = {}
    kernels: tuple[str, ...] = KERNELS
    if ext is None:
        for kernel in KERNELS:
            results[kernel] = KernelCheck(kernel, fused=False, reason=f"the extension did not build: {build_problem}",
                                          failure="build", max_error=None, tolerance_used=None, ms=0.0, **common)
        kernels = ()
    # On the CPU the check runs on one thread: its problems are below the kernels' parallel grain anyway, and waking
    # torch's intra-op pool for each tiny op costs more than the op (tens of ms per kernel on a loaded 2-core machine,
    # about 1 ms on one thread).
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        with _checking(device):
            for kernel in kernels:
                results[kernel] = _check_one(kernel, ext, device, dtype, common)
    finally:
        torch.set_num_threads(threads)
    check_ms = sum(c.ms for c in results.values())
    logger.info("fused kernel self-check on %s %s in %.1f ms (extension ready in %.0f ms): %s", device, dtype_name,
                check_ms, load_ms, "; ".join(_summary(c) for c in results.values()))
    return results


def _summary(c: KernelCheck) -> str:
    errors = f" (max error {c.max_error:.2g}, {c.tolerance_used:.2g}x tolerance)" if c.max_error is not None else ""
    return f"{c.kernel} {'ok' if c.fused else 'FAILED'}{errors}"


def _checking(device: torch.device) -> contextlib.ExitStack:
    """What a check runs under: autograd on and no autocast, also when the first call comes from inside no_grad,
    inference_mode or autocast (evaluation, generation): the check needs autograd and its own dtypes."""
    stack = contextlib.ExitStack()
    for context in (torch.inference_mode(False), torch.enable_grad(), torch.autocast(device.type, enabled=False)):
        stack.enter_context(context)
    return stack


_RESULTS: dict[tuple[str, torch.dtype], dict[str, KernelCheck]] = {}
_FLASH: dict[tuple[str, torch.dtype, int], KernelCheck] = {}


def check(device: torch.device, dtype: torch.dtype) -> dict[str, KernelCheck]:
    """The self-check of every fused kernel on ``device``'s type in ``dtype``: run on first call, then cached."""
    key = (device.type, dtype)
    if key not in _RESULTS:
        _RESULTS[key] = _run(device, dtype)
    return _RESULTS[key]


def check_flash(device: torch.device, dtype: torch.dtype, head_dim: int) -> KernelCheck:
    """The flash attention's self-check on ``device``'s type in ``dtype`` at ``head_dim``: run on first call, then
    cached."""
    key = (device.type, dtype, head_dim)
    if key not in _FLASH:
        rtol, atol = TOLERANCES[dtype]
        common: dict[str, Any] = {"device": str(device), "device_name": _device_name(device, None),
                                  "dtype": str(dtype).removeprefix("torch."), "rtol": rtol, "atol": atol}
        with _checking(device):
            _FLASH[key] = _check_one("flash_attention", None, device, dtype, common, head_dim)
        logger.info("flash attention self-check on %s %s at head dim %d in %.1f ms: %s", device, common["dtype"],
                    head_dim, _FLASH[key].ms, _summary(_FLASH[key]))
    return _FLASH[key]


@functools.cache
def _warn_fallbacks(device_type: str, dtype: torch.dtype) -> None:
    """One warning line per distinct reason (a build failure names all four kernels on one line)."""
    by_reason: dict[str, list[KernelCheck]] = {}
    for c in _RESULTS[(device_type, dtype)].values():
        if not c.fused:
            by_reason.setdefault(c.reason or "", []).append(c)
    for reason, checks in by_reason.items():
        logger.warning("fused %s disabled on %s %s, using the PyTorch reference: %s",
                       ", ".join(c.kernel for c in checks), checks[0].device, checks[0].dtype, reason)


def use_fused(kernel: str, t: torch.Tensor, *, strict: bool) -> bool:
    """Whether to call the fused ``kernel`` on ``t`` (its first tensor argument), running the check on first use.

    A device type or dtype the extension does not serve falls back with a log line in either mode (the fused set's
    per-call constraints, like a padding mask, are checked inside each fused op). A failed check falls back with
    one warning when ``strict`` is False ("auto") and raises BloomstackError when it is True ("fused").
    """
    problem = unsupported(t)
    if problem is not None:
        log_fallback(kernel, problem)
        return False
    return _decide(check(t.device, t.dtype)[kernel], strict)


def _decide(result: KernelCheck, strict: bool) -> bool:
    """``use_fused``'s rule for a check's result: True when it passed; else a warning (auto) or an error (fused)."""
    kernel = result.kernel
    if result.fused:
        return True
    if strict:
        built = result.failure != "build"
        what = "failed its self-check" if built else "is unavailable"
        fix = "set " if built else "fix the build (`bloomtrain build-kernels --verbose` shows the compiler log) or set "
        raise BloomstackError(
            f"model.kernels=fused: the fused {kernel} kernel {what} on {result.device} {result.dtype}: "
            f"{result.reason}; {fix}model.kernels=auto (PyTorch for the kernels that fail) or model.kernels=torch")
    if result.head_dim is not None:
        log_fallback("flash attention", f"it failed its self-check on {result.device} {result.dtype} at head dim "
                     f"{result.head_dim}, using the other attention paths: {result.reason}")
    else:
        _warn_fallbacks(torch.device(result.device).type, getattr(torch, result.dtype))
    return False


def use_flash(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor, mask: torch.Tensor | None,
              *, strict: bool) -> bool:
    """Whether the flash kernel serves this attention call: it supports the call (else one log line per reason, INFO
    for a padding mask, which generation passes by design) and passed its self-check (``use_fused``'s rules)."""
    problem = flash_problem(q, k, v, slopes, mask)
    if problem is not None:
        log_fallback("flash attention", problem, logging.INFO if mask is not None else logging.WARNING)
        return False
    return _decide(check_flash(q.device, q.dtype, q.shape[3]), strict)


def selfcheck_report() -> list[dict]:
    """Every self-check this process ran, one JSON-able dict per (kernel, device type, dtype) (``KernelCheck``).

    Empty when no model ran on "auto" or "fused" kernels (``torch`` never checks).
    """
    return [c.as_dict() for results in _RESULTS.values() for c in results.values()] + \
        [c.as_dict() for c in _FLASH.values()]


def reset() -> None:
    """Forget the checks and their warnings, so the next call checks again (tests)."""
    _RESULTS.clear()
    _FLASH.clear()
    _warn_fallbacks.cache_clear()
