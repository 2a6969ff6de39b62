"""BLOOM's causal ALiBi attention as one flash kernel (Triton), forward and backward, dropout inside.

``flash_attention(q, k, v, slopes, scale, dropout_p)`` has the contract of ``attention_reference`` without a
padding mask: q ``[b, np, sq, hd]``, k/v ``[b, np, sk, hd]``, ``sq <= sk`` (query row i at key ``sk - sq + i``),
``slopes`` ``[np]`` fp32 (this rank's heads under TP), output ``[b, np, sq, hd]`` laid out as ``[b, sq, np, hd]`` so
the model's ``[b, sq, h]`` view of it is free. Memory is O(s) per row: no ``[sq, sk]`` scores, probabilities or
dropout mask exist (bloomtrain.kernels.flash_triton holds the kernels and the maths).

The kernels run as two ``torch.library`` custom ops (forward -> (out, lse), backward -> (dq, dk, dv)) joined by
``register_autograd``: ``torch.compile`` keeps each in a compiled block's graph (bloomtrain.model.compiled) as one
op, which Inductor launches between its own kernels.

Launches: the tiles come from the device's launch plan (bloomtrain.kernels.flash_plans: per architecture and head
dim, with fallbacks); a launch that runs out of resources takes the plan's next tiles, with one warning. The grid
is ``(tiles, np, b)`` and the kernels' offsets are 64-bit: any batch x heads, any tensor size.

Dropout: a Philox counter per (global head, row, key) keyed by a 64-bit seed (``head_offset``: a TP rank's first
head; bloomtrain.kernels.dropout_mask). Each call draws the seed from the torch
generator of the tensors' device, so the run's RNG state (saved in every checkpoint, restored by activation
checkpointing's recompute) replays the same masks, and ``keep_mask(seed, ...)`` rebuilds a call's mask for tests.
The kept values are scaled by ``dropout_scale(p)`` (p quantised to 1/65536).

Where it runs: CUDA, in fp32 (IEEE matmuls, no TF32), fp16 and bf16, head dims up to 256 (padded to a power of
two >= 16 inside). On the CPU only under ``TRITON_INTERPRET=1`` (the exactness tests); the CPU model keeps its own
paths. ``flash_problem`` says why a call is not served, for the dispatcher's one log line.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import torch

from bloomtrain.kernels import flash_plans
from bloomtrain.kernels.dropout_mask import draw_seed
from bloomtrain.kernels.flash_plans import LaunchPlan, Tiles

logger = logging.getLogger("bloomtrain.kernels")

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAX_HEAD_DIM = 256


def interpreted() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``, read when triton is imported)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


@functools.cache
def _triton() -> tuple[ModuleType | None, str | None]:
    try:
        from bloomtrain.kernels import flash_triton  # noqa: PLC0415  (triton is optional on CPU machines)
    except ImportError as exc:
        return None, f"triton is not importable ({exc})"
    return flash_triton, None


def device_capability(device: torch.device) -> tuple[int, int] | None:
    """The compute capability whose launch plan a device uses; None in the interpreter (bloomtrain.kernels
    .flash_plans)."""
    return _capability(device.index if device.index is not None else torch.cuda.current_device()) \
        if device.type == "cuda" else None


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def plan(q: torch.Tensor) -> LaunchPlan:
    """The launch plan of a call: by the device's architecture and the head dim."""
    return flash_plans.plan(q.shape[3], device_capability(q.device))


_CHOSEN: dict[tuple, int] = {}  # (kernel, capability, head-dim class, dtype) -> the plan's tiles that launched


def _launch(kernel: str, q: torch.Tensor, launch: Callable[[Tiles], None]) -> None:
    """Launch ``kernel`` (fwd, dkdv, dq) with the first of its plan's tiles that fits the device. A launch that runs
    out of resources (shared memory, registers) takes the next, with one warning; the choice is remembered."""
    kernels, _ = _triton()
    assert kernels is not None
    capability = device_capability(q.device)
    candidates = flash_plans.plan(q.shape[3], capability).tiles(kernel)
    key = (kernel, capability, flash_plans.head_dim_class(q.shape[3]), q.dtype)
    for i in range(_CHOSEN.get(key, 0), len(candidates)):
        try:
            launch(candidates[i])
        except kernels.OutOfResources as exc:
            if i + 1 == len(candidates):
                raise
            logger.warning("flash attention %s: tiles %s do not fit this GPU (sm %s, head dim %d, %s: %s); "
                           "using %s (bloomtrain build-kernels --targets shows what each plan needs)", kernel,
                           candidates[i], capability, q.shape[3], str(q.dtype).removeprefix("torch."),
                           str(exc).strip().splitlines()[0], candidates[i + 1])
            continue
        _CHOSEN[key] = i
        return


def flash_problem(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor,
                  mask: torch.Tensor | None) -> str | None:
    """Why the flash kernel cannot serve this call (None: it can)."""
    if mask is not None:
        return "a padding mask was given (the flash kernel applies the causal mask only)"
    if q.dim() != 4 or k.shape != v.shape or q.shape[:2] != k.shape[:2] or q.shape[3] != k.shape[3]:
        return "q, k, v are not [b, np, s, hd] tensors of one batch, head count and head dim"
    if q.shape[2] > k.shape[2]:
        return "more queries than keys"
    if q.numel() == 0 or k.shape[2] == 0:
        return "an empty tensor"
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return f"dtype {q.dtype} (the flash kernel takes one of fp32, fp16, bf16 for q, k and v)"
    if q.shape[3] > MAX_HEAD_DIM:
        return f"head dim {q.shape[3]} > {MAX_HEAD_DIM}"
    if not (q.is_cuda or (q.device.type == "cpu" and interpreted())):
        return f"device type {q.device.type!r} (the flash kernel runs on CUDA)"
    if slopes.shape != q.shape[1:2] or slopes.device != q.device or slopes.requires_grad:
        return "slopes is not a constant [np] tensor on the inputs' device"
    return _triton()[1]


def _strides(t: torch.Tensor) -> tuple[int, int, int]:
    return t.stride(0), t.stride(1), t.stride(2)


def _like_heads_last(t: torch.Tensor, seq: int) -> torch.Tensor:
    """An empty ``[b, np, seq, hd]`` tensor stored as ``[b, seq, np, hd]`` (the model's layout)."""
    b, heads, _, hd = t.shape
    return t.new_empty(b, seq, heads, hd).transpose(1, 2)


@dataclass(frozen=True)
class Call:
    """The scalars of one attention call: the score scale (1 / sqrt(hd)), the dropout probability and the model's
    index of the first head (a TP rank's offset: dropout masks are keyed by the global head)."""

    scale: float
    dropout_p: float
    head_offset: int = 0
    tiles: Tiles | None = None
    """The forward's tiles (benchmarks/bench_flash_tiles.py); None: the launch plan's, with its fallbacks."""


def grid(tiles: int, q: torch.Tensor) -> tuple[int, int, int]:
    """A launch grid ``(tiles, np, b)``: heads and batch in dimensions of their own (each up to 65,535)."""
    return tiles, q.shape[1], q.shape[0]


def _common(q: torch.Tensor, k: torch.Tensor, call: Call) -> dict:
    kernels, _ = _triton()
    assert kernels is not None
    scale, dropout_p = call.scale, call.dropout_p
    hd = q.shape[3]
    return {"HEAD0": call.head_offset, "SQ": q.shape[2], "SK": k.shape[2], "HEAD_DIM": hd,
            "qk_scale2": scale * kernels.LOG2E,
            "threshold": kernels.dropout_threshold(dropout_p) if dropout_p else 0,
            "keep_scale": kernels.dropout_scale(dropout_p) if dropout_p else 1.0,
            "BLOCK_D": max(16, 1 << (hd - 1).bit_length()), "DROPOUT": bool(dropout_p),
            "DOT_MODE": _dot_mode(q.dtype)}


def _dot_mode(dtype: torch.dtype) -> str:
    if dtype == torch.float32:
        return "ieee"
    return "upcast" if dtype == torch.bfloat16 and interpreted() else "tf32"


def _tile_args(t: Tiles, sq: int, sk: int) -> dict:
    """Launch arguments of one tile shape; EVEN_M/EVEN_N: the rows/keys fill whole tiles (no bounds masks)."""
    return {"BLOCK_M": t.block_m, "BLOCK_N": t.block_n, "EVEN_M": sq % t.block_m == 0, "EVEN_N": sk % t.block_n == 0,
            "num_warps": t.num_warps, "num_stages": t.num_stages}


def _forward(q, k, v, slopes, seed, call: Call) -> tuple[torch.Tensor, torch.Tensor]:
    """Output and lse (the kernel's tiles: ``call.tiles``, else the launch plan's with its fallbacks)."""
    kernels, _ = _triton()
    assert kernels is not None
    b, heads, sq, _ = q.shape
    out = _like_heads_last(q, sq)
    lse = q.new_empty(b * heads, sq, dtype=torch.float32)  # base-2 log-sum-exp of each row's scaled scores

    def launch(tiles: Tiles) -> None:
        kernels.attention_fwd_kernel[grid(triton_cdiv(sq, tiles.block_m), q)](
            q, k, v, slopes, seed, out, lse, *_strides(q), *_strides(k), *_strides(v), *_strides(out),
            **_common(q, k, call), **_tile_args(tiles, sq, k.shape[2]))

    if call.tiles is None:
        _launch("fwd", q, launch)
    else:
        launch(call.tiles)
    return out, lse


@dataclass(frozen=True)
class Backward:
    """What the backward kernels read: the saved tensors and ``dO``. ``delta`` (fp32 ``[b * np, sq]``) is written by
    the dQ kernel (``rowsum(dO * O)``) and read by the dK/dV kernel, so ``launch_dq`` goes first."""

    do: torch.Tensor
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    out: torch.Tensor
    lse: torch.Tensor
    delta: torch.Tensor
    slopes: torch.Tensor
    seed: torch.Tensor
    call: Call

    def args(self) -> tuple:
        return (self.q, self.k, self.v, self.do, self.slopes, self.seed, self.lse, self.delta,
                *_strides(self.q), *_strides(self.k), *_strides(self.v), *_strides(self.do))

    def common(self) -> dict:
        return dict(_common(self.q, self.k, self.call), sm_scale=self.call.scale)


def launch_dkdv(bw: Backward, dk: torch.Tensor, dv: torch.Tensor, tiles: Tiles) -> None:
    kernels, _ = _triton()
    assert kernels is not None
    q, k, v, do, slopes, seed, lse, delta, *strides = bw.args()
    kernels.attention_bwd_dkdv_kernel[grid(triton_cdiv(k.shape[2], tiles.block_n), q)](
        q, k, v, do, slopes, seed, lse, delta, dk, dv, *strides, *_strides(dk), *_strides(dv), **bw.common(),
        **_tile_args(tiles, bw.q.shape[2], bw.k.shape[2]))


def launch_dq(bw: Backward, dq: torch.Tensor, tiles: Tiles) -> None:
    """dQ, and ``bw.delta`` for ``launch_dkdv``."""
    kernels, _ = _triton()
    assert kernels is not None
    q, k, v, do, slopes, seed, lse, delta, *strides = bw.args()
    kernels.attention_bwd_dq_kernel[grid(triton_cdiv(q.shape[2], tiles.block_m), q)](
        q, k, v, do, slopes, seed, lse, delta, bw.out, dq, *strides, *_strides(bw.out), *_strides(dq), **bw.common(),
        **_tile_args(tiles, bw.q.shape[2], bw.k.shape[2]))


def backward_of(do: torch.Tensor, saved: tuple[torch.Tensor, ...], call: Call) -> Backward:
    """The backward kernels' inputs from dO and the forward's ``(q, k, v, out, lse, slopes, seed)``."""
    q, k, v, out, lse, slopes, seed = saved
    delta = lse.new_empty(lse.shape)  # rowsum(dO * O), fp32 [b * np, sq]: written by the dQ kernel
    return Backward(do, q, k, v, out, lse, delta, slopes, seed, call)


def _backward(do, saved: tuple[torch.Tensor, ...], call: Call):
    """dq, dk, dv from dO and the forward's ``(q, k, v, out, lse, slopes, seed)``."""
    bw = backward_of(do, saved, call)
    q, k, v = bw.q, bw.k, bw.v
    dq, dk, dv = _like_heads_last(q, q.shape[2]), _like_heads_last(k, k.shape[2]), _like_heads_last(v, v.shape[2])
    _launch("dq", q, lambda tiles: launch_dq(bw, dq, tiles))  # first: it writes delta
    _launch("dkdv", q, lambda tiles: launch_dkdv(bw, dk, dv, tiles))
    return dq, dk, dv


def triton_cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _last_dim_dense(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


@torch.library.custom_op("bloomtrain::flash_alibi_attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor, seed: torch.Tensor,
                  scale: float, dropout_p: float, head_offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    return _forward(_last_dim_dense(q), _last_dim_dense(k), _last_dim_dense(v), slopes.float().contiguous(), seed,
                    Call(scale, dropout_p, head_offset))


@_attention_op.register_fake
def _(q, *_):
    b, heads, sq, _ = q.shape
    return _like_heads_last(q, sq), q.new_empty(b * heads, sq, dtype=torch.float32)


@torch.library.custom_op("bloomtrain::flash_alibi_attention_backward", mutates_args=())
def _attention_backward_op(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                           lse: torch.Tensor, slopes: torch.Tensor, seed: torch.Tensor, scale: float,
                           dropout_p: float, head_offset: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    saved = (_last_dim_dense(q), _last_dim_dense(k), _last_dim_dense(v), out, lse, slopes.float().contiguous(), seed)
    return _backward(_last_dim_dense(do), saved, Call(scale, dropout_p, head_offset))


@_attention_backward_op.register_fake
def _(do, q, k, v, *_):
    return _like_heads_last(q, q.shape[2]), _like_heads_last(k, k.shape[2]), _like_heads_last(v, v.shape[2])


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, slopes, seed, scale, dropout_p, head_offset = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, slopes, seed)
    ctx.scale, ctx.dropout_p, ctx.head_offset = scale, dropout_p, head_offset


def _attention_grad(ctx, dout, _dlse):
    q, k, v, out, lse, slopes, seed = ctx.saved_tensors
    dq, dk, dv = _attention_backward_op(dout, q, k, v, out, lse, slopes, seed, ctx.scale, ctx.dropout_p,
                                        ctx.head_offset)
    return dq, dk, dv, None, None, None, None, None


_attention_op.register_autograd(_attention_grad, setup_context=_setup_context)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor, scale: float,
                    dropout_p: float = 0.0, seed: torch.Tensor | None = None, head_offset: int = 0) -> torch.Tensor:
    """Causal ALiBi attention ``dropout(softmax(scale q k^T + alibi)) v``; ``seed``: the dropout key (tests);
    ``head_offset``: the model's index of ``q``'s first head (TP rank x local heads), which keys the dropout mask."""
    if dropout_p and seed is None:
        seed = draw_seed(q.device)
    elif seed is None:
        seed = torch.zeros(1, dtype=torch.int64, device=q.device)
    out, _ = _attention_op(q, k, v, slopes, seed, float(scale), float(dropout_p), int(head_offset))
    return out


def keep_mask(seed: torch.Tensor, shape: tuple[int, int, int, int], dropout_p: float,
              head_offset: int = 0) -> torch.Tensor:
    """The keep mask (bool ``[b, np, sq, sk]``) that the kernels apply for this seed, ``dropout_p`` and head offset,
    built by the Triton kernels' own ``_keep`` (bloomtrain.kernels.dropout_mask.keep_mask builds it in torch)."""
    kernels, problem = _triton()
    if kernels is None:
        raise RuntimeError(problem)
    b, heads, sq, sk = shape
    out = torch.empty(b, heads, sq, sk, dtype=torch.int8, device=seed.device)
    kernels.keep_mask_kernel[(triton_cdiv(sq, 32), heads, b)](seed, out, head_offset, sq, sk,
                                                              kernels.dropout_threshold(dropout_p),
                                                              BLOCK_M=32, BLOCK_N=32)
    return out.bool()


def dropout_scale(dropout_p: float) -> float:
    kernels, problem = _triton()
    if kernels is None:
        raise RuntimeError(problem)
    return kernels.dropout_scale(dropout_p)
