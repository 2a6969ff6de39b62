"""The attention-dropout keep mask, one definition for every attention path: Philox4x32-10 keyed by a 64-bit seed,
counted per global head, so tensor parallelism does not change which probabilities are dropped.

Counter. Key j of query row i of batch entry b and *global* head g (``head_offset + local head``) takes its random
number from Philox call ``counter = ((g * B + b) * sq + i) * ceil(sk / 8) + j // 8`` (``B`` the batch size): one
call gives four 32-bit words, split into eight 16-bit numbers for eight consecutive keys of one row, and the key is
dropped when its number is below ``threshold = round(p * 65536)``. Kept values are scaled by
``65536 / (65536 - threshold)`` (``dropout_scale``), so the expectation is exact for the quantised p.

Under TP a rank holds heads ``[head_offset, head_offset + np)`` of the model's, and every TP rank of one
data-parallel rank draws the same seed (their torch generators are seeded alike, bloomtrain.train), so a rank drops
exactly what a TP 1 run drops for the same heads: the masks of the TP ranks, concatenated over heads, are TP 1's.

Two implementations of the same bits: the Triton kernels (bloomtrain.kernels.flash_triton, ``_keep``) and
``keep_mask`` here in torch integer ops (the CPU paths and the CUDA reference path). Philox's 32 x 32 -> 64-bit
products are formed from 16-bit halves in int64, so no intermediate overflows.
"""

from __future__ import annotations

import torch

RNG_GROUP = 8  # keys per Philox call: four 32-bit words, two 16-bit numbers each
RNG_RANGE = 65536
_ROUND_A, _ROUND_B = 0xD2511F53, 0xCD9E8D57  # Philox4x32 multipliers
_KEY_A, _KEY_B = 0x9E3779B9, 0xBB67AE85  # Philox4x32 key increments (Weyl sequence)
_LOW32 = 0xFFFFFFFF
_ROUNDS = 10


def dropout_threshold(p: float) -> int:
    """Keys whose 16-bit number is below this are dropped: p quantised to 1/65536."""
    return round(p * RNG_RANGE)


def dropout_scale(p: float) -> float:
    """The scale of kept values, 1 / (1 - quantised p): the expectation of the output is unchanged."""
    return RNG_RANGE / (RNG_RANGE - dropout_threshold(p))


def draw_seed(device: torch.device) -> torch.Tensor:
    """A Philox key from the torch generator of ``device`` (int64 ``[1]`` on that device: no host sync)."""
    return torch.randint(0, 2**62, (1,), device=device, dtype=torch.int64)


def _mulhilo(a: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 32-bit words of ``a * x`` for a 32-bit constant ``a`` and int64 ``x`` in [0, 2^32)."""
    lo_part = a * (x & 0xFFFF)  # < 2^48
    hi_part = a * (x >> 16)  # < 2^48
    high = (hi_part + (lo_part >> 16)) >> 16
    low = ((hi_part & 0xFFFF) << 16) + lo_part
    return high, low & _LOW32


def philox4x32(seed: torch.Tensor, counter: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Philox4x32-10 of a 64-bit ``counter`` (int64, as words c0 = low, c1 = high, c2 = c3 = 0) under the 64-bit
    ``seed`` (int64 ``[1]``: key k0 = low, k1 = high word): four int64 tensors of 32-bit words, as Triton's
    ``tl.randint4x(seed, counter)`` returns them."""
    zero = torch.zeros_like(counter)
    return philox_rounds((counter & _LOW32, (counter >> 32) & _LOW32, zero, zero), (seed & _LOW32,
                                                                                    (seed >> 32) & _LOW32))


def philox_rounds(c: tuple[torch.Tensor, ...], k: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The ten Philox4x32 rounds of counter words ``c`` under key words ``k`` (int64 tensors of 32-bit values)."""
    (c0, c1, c2, c3), (k0, k1) = c, k
    for _ in range(_ROUNDS):
        hi_b, lo_b = _mulhilo(_ROUND_B, c2)
        hi_a, lo_a = _mulhilo(_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + _KEY_A) & _LOW32, (k1 + _KEY_B) & _LOW32
    return c0, c1, c2, c3


def keep_mask(seed: torch.Tensor, shape: tuple[int, int, int, int], dropout_p: float,
              head_offset: int = 0) -> torch.Tensor:
    """Bool ``[b, np, sq, sk]``: the keys a call with this seed keeps, for heads ``head_offset ..`` of the model."""
    b, heads, sq, sk = shape
    groups = -(-sk // RNG_GROUP)
    device = seed.device
    stream = (torch.arange(heads, device=device) + head_offset).view(1, heads, 1, 1) * b \
        + torch.arange(b, device=device).view(b, 1, 1, 1)
    counter = (stream * sq + torch.arange(sq, device=device).view(1, 1, sq, 1)) * groups \
        + torch.arange(groups, device=device).view(1, 1, 1, groups)  # [b, np, sq, groups]
    r0, r1, r2, r3 = philox4x32(seed.view(()), counter)
    # Key order inside a group (the Triton kernel's join and reshape): r0, r2, r1, r3, low half first.
    threshold = dropout_threshold(dropout_p)
    keep = [half >= threshold for word in (r0, r2, r1, r3) for half in (word & 0xFFFF, word >> 16)]
    return torch.stack(keep, dim=-1).view(b, heads, sq, groups * RNG_GROUP)[..., :sk]


def apply_dropout(probs: torch.Tensor, dropout_p: float, head_offset: int = 0) -> torch.Tensor:
    """Attention dropout of ``probs`` ``[b, np, sq, sk]`` with the Philox mask of a seed drawn from the device's
    generator (the flash kernel's draw: a checkpointed RNG state replays it)."""
    b, heads, sq, sk = probs.shape
    keep = keep_mask(draw_seed(probs.device), (b, heads, sq, sk), dropout_p, head_offset)
    return probs.mul(dropout_scale(dropout_p)).masked_fill(~keep, 0.0)
