"""PyTorch references for the three fused operations. Every fused kernel is tested against these.

Each reference lives beside its fused autograd Function (layer_norm.py, bias_gelu.py,
alibi_softmax.py); this module keeps the names the model and tests import.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from bloomtrain.kernels.alibi_softmax import alibi_softmax_reference as alibi_softmax
from bloomtrain.kernels.attention import attention_reference
from bloomtrain.kernels.bias_gelu import bias_gelu_reference as bias_gelu
from bloomtrain.kernels.layer_norm import layer_norm_reference as layer_norm


@dataclass(frozen=True)
class KernelSet:
    """The operations the model calls, plus the name of the implementation behind them.

    ``attention(q, k, v, slopes, scale, mask, dropout_p, head_offset=0)`` wraps ``alibi_softmax`` with the two attention
    matmuls (bloomtrain.kernels.attention); by default it is the full-square composition over this set's softmax.
    """

    name: str
    layer_norm: Callable[..., torch.Tensor]
    bias_gelu: Callable[..., torch.Tensor]
    alibi_softmax: Callable[..., torch.Tensor]
    attention: Callable[..., torch.Tensor] | None = None
    traceable: bool = False
    """``attention`` may be traced by torch.compile: it decides nothing per call that a graph cannot hold (a compiled
    block's set, bloomtrain.model.compiled, whose flash-or-reference choice was made when the block was built)."""
    model_attention: Callable[..., torch.Tensor] = field(init=False, repr=False, compare=False)
    """What the model calls: ``attention`` itself when ``traceable``, else ``attention`` behind
    ``torch.compiler.disable``, so that a per-call dispatch (self-checks, fallbacks, log lines) is never traced."""

    def __post_init__(self) -> None:
        if self.attention is None:
            object.__setattr__(self, "attention", functools.partial(attention_reference, softmax=self.alibi_softmax))
        attention = self.attention if self.traceable else torch.compiler.disable(self.attention)
        object.__setattr__(self, "model_attention", attention)


def reference_kernels() -> KernelSet:
    return KernelSet("torch", layer_norm, bias_gelu, alibi_softmax)


__all__ = ["KernelSet", "alibi_softmax", "bias_gelu", "layer_norm", "reference_kernels"]
