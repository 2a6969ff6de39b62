"""LayerNorm over the last dim with fp32 statistics: the PyTorch reference and the fused kernel.

The fused kernel (csrc/kernels/layer_norm_{cpu.cpp,cuda.cu}) reads x once per pass and keeps
mean and 1/std per row (fp32, fp64 for fp64 inputs) for the backward, which also returns
dweight/dbias reduced over all rows. weight/bias may be fp32 or x's dtype (mixed precision as in
Megatron's MixedFusedLayerNorm); their gradients come back in their own dtype.
"""

from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from bloomtrain.kernels.fallback import resolve


def layer_norm_reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm over the last dim with fp32 statistics; output in x.dtype."""
    y = F.layer_norm(x.float(), x.shape[-1:], weight.float(), bias.float(), eps)
    return y.to(x.dtype)


class FusedLayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps: float, ext: ModuleType):
        y, mean, rstd = ext.layer_norm_fwd(x, weight, bias, float(eps))
        ctx.save_for_backward(x, weight, mean, rstd)
        ctx.ext = ext
        ctx.bias_dtype = bias.dtype
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dweight, dbias = ctx.ext.layer_norm_bwd(dy, x, weight, mean, rstd)
        return dx.view(x.shape), dweight.to(weight.dtype), dbias.to(ctx.bias_dtype), None, None


def _problem(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> str | None:
    if x.dim() == 0 or x.numel() == 0:
        return "empty or 0-d input"
    if weight.shape != x.shape[-1:] or bias.shape != x.shape[-1:]:
        return "weight/bias shape differs from the last dim of x"
    if weight.device != x.device or bias.device != x.device:
        return "weight/bias on another device than x"
    return None


def fused_layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """Same contract as ``layer_norm_reference``; runs the fused kernel when it supports the call."""
    ext = resolve("layer_norm", x, _problem(x, weight, bias))
    if ext is None:
        return layer_norm_reference(x, weight, bias, eps)
    return FusedLayerNormFunction.apply(x, weight, bias, eps, ext)
