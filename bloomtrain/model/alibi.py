"""ALiBi slopes as BLOOM trained them, and the slice a tensor-parallel rank owns.

For n heads with c = 2**floor(log2 n): the first c slopes are 2**(-8(i+1)/c); a non-power-of-two n
takes the remaining n - c slopes from the even positions of the 2c-head set, i.e. 2**(-8(2i+1)/(2c))
(Megatron-DeepSpeed megatron/model/transformer.py, get_slopes; docs/bloom-training.md, "ALiBi slopes").
The bias added to score (i, j) is slope_h * j: softmax is shift-invariant per row, so the key position
alone is enough.
"""

from __future__ import annotations

import math

import torch


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))  # = 2**(-8/n)
    return [start ** (i + 1) for i in range(n)]


def alibi_slopes(num_heads: int) -> torch.Tensor:
    """The ``[num_heads]`` fp32 slopes of all heads, head 0 first."""
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = _power_of_two_slopes(closest)
    if closest != num_heads:
        slopes += _power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float32)


def local_alibi_slopes(num_heads: int, tp_rank: int, tp_size: int) -> torch.Tensor:
    """The slopes of the contiguous block of heads that ``tp_rank`` owns: ``[num_heads / tp_size]``."""
    if num_heads % tp_size:
        raise ValueError(f"num_heads={num_heads} is not divisible by tensor-parallel size {tp_size}")
    per_rank = num_heads // tp_size
    return alibi_slopes(num_heads)[tp_rank * per_rank : (tp_rank + 1) * per_rank].clone()
