"""Causal attention around the ALiBi softmax: the reference composition and the fused block-causal path.

Shapes: q, k, v ``[b, np, s, hd]`` (keys may be longer than queries with a KV cache); output ``[b, np, sq, hd]``.

Reference (``attention_reference``): ``softmax(q @ k^T) @ v`` over the whole ``[sq, sk]`` square with the kernel
set's ALiBi softmax, then attention dropout on the probabilities. This is what transformers and
Megatron-DeepSpeed compute: the upper triangle of a causal square is multiplied, exp'd and then zeroed. The dropout
mask is the flash kernel's Philox mask (bloomtrain.kernels.dropout_mask), keyed by the global head: ``head_offset``
is the model's index of q's first head, so a TP rank drops what TP 1 drops for its heads.

Fused (``fused_causal_attention``): queries are cut into blocks of ``BLOCK_ROWS`` rows. Block ``[lo, hi)``
multiplies against keys ``[0, hi)`` only, and the fused softmax applies the causal mask inside the block through
its query-offset contract (row r of an ``[sq, sk]`` call sits at key ``sk - sq + r``), so no mask tensor exists.
With n blocks, the three matmuls of the forward and the four of the backward do ``(n + 1) / 2n`` of the
square's work, and each block's scores are still in cache when the softmax reads them. Only the blocks'
probabilities are saved for the backward, also ``(n + 1) / 2n`` of the square. The two paths compute the same
function: the skipped keys get probability exactly 0 in the reference too (tests compare them).

The fused path needs sq == sk (training, or a prompt without a cache prefix), no padding mask and no attention
dropout in training. BLOOM trained with attention dropout 0.1 (Megatron-DeepSpeed's default; the recipes keep
it), so its recipes train on the full square; runs with ``model.attention_dropout=0`` take this path. Other
calls run the reference composition over the kernel set's softmax (fused unless it failed its self-check),
with one log line per reason.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import torch
from torch.autograd.function import once_differentiable

from bloomtrain.kernels.alibi_softmax import _problem, fused_alibi_softmax
from bloomtrain.kernels.dropout_mask import apply_dropout
from bloomtrain.kernels.fallback import resolve

# Query rows per block. 128 rows keep a block's fp32 scores (b * np * 128 * s * 4 bytes) near the L2 size for
# the CPU shapes we train and leave the matmuls large enough to run at full speed; long sequences use at most
# MAX_BLOCKS blocks (the last halvings of the skipped work are not worth more, smaller matmuls).
BLOCK_ROWS = 128
MAX_BLOCKS = 16


def attention_reference(q, k, v, slopes, scale: float, mask=None, dropout_p: float = 0.0, *,
                        softmax: Callable[..., torch.Tensor], head_offset: int = 0) -> torch.Tensor:
    """``dropout(softmax(q @ k^T)) @ v`` over the full square; ``dropout_p`` is 0 outside training."""
    probs = softmax(torch.matmul(q, k.transpose(-1, -2)), slopes, scale, mask)  # [b, np, sq, sk]
    if dropout_p:
        probs = apply_dropout(probs, dropout_p, head_offset)
    return torch.matmul(probs, v)


def block_bounds(s: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` query blocks covering ``s`` rows: ``BLOCK_ROWS`` each, at most ``MAX_BLOCKS`` of them."""
    n = max(1, min(MAX_BLOCKS, -(-s // BLOCK_ROWS)))
    edges = [s * i // n for i in range(n + 1)]
    return list(zip(edges[:-1], edges[1:]))


class BlockCausalAttentionFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, slopes, scale: float, ext: ModuleType):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        bounds = block_bounds(q.shape[2])
        probs, outs = [], []
        for lo, hi in bounds:
            scores = torch.matmul(q[:, :, lo:hi], k[:, :, :hi].transpose(-1, -2))  # [b, np, hi - lo, hi]
            p = ext.alibi_softmax_fwd(scores, slopes, float(scale))
            probs.append(p)
            outs.append(torch.matmul(p, v[:, :, :hi]))
        ctx.save_for_backward(q, k, v, *probs)
        ctx.ext, ctx.scale, ctx.bounds = ext, float(scale), bounds
        return torch.cat(outs, dim=2)

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        q, k, v, *probs = ctx.saved_tensors
        dout = dout.contiguous()
        dq = torch.empty_like(q)
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)
        for (lo, hi), p in zip(ctx.bounds, probs):
            do = dout[:, :, lo:hi]
            dv[:, :, :hi] += torch.matmul(p.transpose(-1, -2), do)
            dscores = ctx.ext.alibi_softmax_bwd(torch.matmul(do, v[:, :, :hi].transpose(-1, -2)), p, ctx.scale)
            dq[:, :, lo:hi] = torch.matmul(dscores, k[:, :, :hi])
            dk[:, :, :hi] += torch.matmul(dscores.transpose(-1, -2), q[:, :, lo:hi])
        return dq, dk, dv, None, None, None


def _block_problem(q, k, slopes, mask, dropout_p: float) -> str | None:
    if q.shape[2] != k.shape[2]:
        return "queries and keys differ in length (KV-cache decoding); the full square runs"
    if dropout_p:
        return "attention dropout is on (the block path applies none); the full square runs"
    return _problem(q, slopes, mask)  # the fused softmax's own checks (padding mask, slopes)


def fused_causal_attention(q, k, v, slopes, scale: float, mask=None, dropout_p: float = 0.0, *,
                           softmax: Callable[..., torch.Tensor] = fused_alibi_softmax,
                           head_offset: int = 0) -> torch.Tensor:
    """Same contract as ``attention_reference``; block-causal when it applies, else the full square over ``softmax``.

    ``softmax`` serves the calls the block path does not take (the "auto" set passes its own, which is the
    reference where the fused softmax failed its self-check).
    """
    op = "block-causal attention"
    # A KV-cache step or a padding mask is generation's normal case (INFO); dropout in training is worth a WARNING.
    expected = q.shape[2] != k.shape[2] or (not dropout_p and mask is not None)
    ext = resolve(op, q, _block_problem(q, k, slopes, mask, dropout_p), expected=expected)
    if ext is not None and q.is_cuda and k.shape[2] > ext.cuda_softmax_max_keys():
        ext = resolve(op, q, f"the CUDA softmax supports at most {ext.cuda_softmax_max_keys()} keys")
    if ext is None:
        return attention_reference(q, k, v, slopes, scale, mask, dropout_p, softmax=softmax, head_offset=head_offset)
    return BlockCausalAttentionFunction.apply(q, k, v, slopes, scale, ext)
