"""Scaled causal softmax with the ALiBi bias added inside: the PyTorch reference and the fused kernel.

BLOOM pre-adds ALiBi with ``baddbmm`` in bf16 and then runs Megatron's causal softmax kernel
(docs/bloom-training.md, "Attention scaling and the fused softmax"). Adding ``slope_h * j`` inside the
kernel in fp32 saves the [b*np, 1, sk] bias tensor, its bf16 rounding (up to 4.0 at far keys) and one
pass over the scores. The fused path supports the causal mask only; calls with a padding mask use the
reference (which handles fully masked rows: uniform attention over finfo.min entries).
Masked keys are neither read nor exp'd: a causal square costs about half the full softmax.
"""

from __future__ import annotations

from types import ModuleType

import torch
from torch.autograd.function import once_differentiable

from bloomtrain.kernels.fallback import resolve


def alibi_softmax_reference(
    scores: torch.Tensor,
    slopes: torch.Tensor,
    scale: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(scale * scores + slope_h * j) over keys j, causal, in fp32; output in scores.dtype.

    scores: [b, np, sq, sk]; slopes: [np]; mask: optional bool [b, 1, sq, sk], True = masked out.
    """
    b, nh, sq, sk = scores.shape
    x = scores.float() * scale
    key_pos = torch.arange(sk, device=scores.device, dtype=torch.float32)
    x = x + slopes.float().view(1, nh, 1, 1) * key_pos.view(1, 1, 1, sk)
    query_pos = torch.arange(sk - sq, sk, device=scores.device).view(sq, 1)
    causal = key_pos.view(1, sk).long() > query_pos  # [sq, sk], True above the diagonal
    masked = causal.view(1, 1, sq, sk)
    if mask is not None:
        masked = masked | mask
    x = x.masked_fill(masked, torch.finfo(torch.float32).min)
    return torch.softmax(x, dim=-1).to(scores.dtype)


class FusedAlibiSoftmaxFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, scores, slopes, scale: float, ext: ModuleType):
        probs = ext.alibi_softmax_fwd(scores, slopes, float(scale))
        # Like Megatron's kernel, the backward uses the probabilities in scores.dtype.
        ctx.save_for_backward(probs)
        ctx.ext = ext
        ctx.scale = float(scale)
        return probs

    @staticmethod
    @once_differentiable
    def backward(ctx, dprobs):
        (probs,) = ctx.saved_tensors
        return ctx.ext.alibi_softmax_bwd(dprobs, probs, ctx.scale), None, None, None


def _problem(scores: torch.Tensor, slopes: torch.Tensor, mask: torch.Tensor | None) -> str | None:
    if mask is not None:
        return "a padding mask was given (the fused kernel applies the causal mask only)"
    if scores.dim() != 4 or scores.numel() == 0:
        return "scores is not a non-empty [b, np, sq, sk] tensor"
    if slopes.shape != scores.shape[1:2] or slopes.device != scores.device:
        return "slopes is not an [np] tensor on the scores' device"
    if slopes.requires_grad:
        return "slopes requires grad (the fused backward returns no slope gradient)"
    return None


def fused_alibi_softmax(
    scores: torch.Tensor,
    slopes: torch.Tensor,
    scale: float,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Same contract as ``alibi_softmax_reference``; runs the fused kernel when it supports the call."""
    problem = _problem(scores, slopes, mask)
    ext = resolve("alibi_softmax", scores, problem, expected=mask is not None)
    if ext is not None and scores.is_cuda and scores.shape[-1] > ext.cuda_softmax_max_keys():
        resolve("alibi_softmax", scores, f"CUDA kernel supports at most {ext.cuda_softmax_max_keys()} keys")
        ext = None
    if ext is None:
        return alibi_softmax_reference(scores, slopes, scale, mask)
    return FusedAlibiSoftmaxFunction.apply(scores, slopes, scale, ext)
