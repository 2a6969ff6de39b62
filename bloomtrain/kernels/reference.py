"""PyTorch references for the three fused operations. Every fused kernel is tested against these."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm over the last dim with fp32 statistics; output in x.dtype."""
    y = F.layer_norm(x.float(), x.shape[-1:], weight.float(), bias.float(), eps)
    return y.to(x.dtype)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """tanh-GeLU(x + bias): 0.5 y (1 + tanh(sqrt(2/pi) (y + 0.044715 y^3))), as BLOOM trained."""
    y = x + bias
    return y * 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * y * (1.0 + 0.044715 * y * y)))


def alibi_softmax(
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


@dataclass(frozen=True)
class KernelSet:
    """The three operations the model calls, plus the name of the implementation behind them."""

    name: str
    layer_norm: Callable[..., torch.Tensor]
    bias_gelu: Callable[..., torch.Tensor]
    alibi_softmax: Callable[..., torch.Tensor]


def reference_kernels() -> KernelSet:
    return KernelSet("torch", layer_norm, bias_gelu, alibi_softmax)
