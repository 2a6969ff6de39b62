"""bias + tanh-GeLU (BLOOM's GeLU): the PyTorch reference and the fused kernel.

The fused kernel computes u = x + bias and the GeLU in fp32 in one pass (the reference rounds
after every op in x's dtype), and its backward returns dbias summed in fp32 from the unrounded dx.
"""

from __future__ import annotations

import math
from types import ModuleType

import torch
from torch.autograd.function import once_differentiable

from bloomtrain.kernels.fallback import resolve


def bias_gelu_reference(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """tanh-GeLU(x + bias): 0.5 y (1 + tanh(sqrt(2/pi) (y + 0.044715 y^3))), as BLOOM trained."""
    y = x + bias
    return y * 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * y * (1.0 + 0.044715 * y * y)))


class FusedBiasGeLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias, ext: ModuleType):
        ctx.save_for_backward(x, bias)
        ctx.ext = ext
        return ext.bias_gelu_fwd(x, bias)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        x, bias = ctx.saved_tensors
        dx, dbias = ctx.ext.bias_gelu_bwd(dy, x, bias)
        return dx.view(x.shape), dbias.to(bias.dtype), None


def _problem(x: torch.Tensor, bias: torch.Tensor) -> str | None:
    if x.dim() == 0 or x.numel() == 0:
        return "empty or 0-d input"
    if bias.shape != x.shape[-1:]:
        return "bias shape differs from the last dim of x"
    if bias.device != x.device:
        return "bias on another device than x"
    if bias.dtype != x.dtype and bias.dtype != torch.float32:
        return "bias dtype is neither x's dtype nor float32"
    return None


def fused_bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Same contract as ``bias_gelu_reference``; runs the fused kernel when it supports the call."""
    ext = resolve("bias_gelu", x, _problem(x, bias))
    if ext is None:
        return bias_gelu_reference(x, bias)
    return FusedBiasGeLUFunction.apply(x, bias, ext)
