"""Attention-dropout masks keyed by the global head (bloomtrain.kernels.dropout_mask): the torch Philox against
Random123's known answers and the Triton kernels' own mask (``TRITON_INTERPRET=1`` on a CPU, set by
tests/conftest.py), and tensor parallelism: the masks of TP 2's two ranks, concatenated over heads, are TP 1's, bit
for bit, in the flash kernel and in the CPU attention path; so are their outputs and gradients.
"""

from __future__ import annotations

import pytest
import torch

from bloomtrain.kernels import dropout_mask as dm
from bloomtrain.kernels import flash_attention as fa
from bloomtrain.kernels.alibi_softmax import alibi_softmax_reference
from bloomtrain.kernels.attention import attention_reference
from bloomtrain.model.alibi import alibi_slopes

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _words(*values: int) -> tuple[torch.Tensor, ...]:
    return tuple(torch.tensor([v], dtype=torch.int64) for v in values)


@pytest.mark.parametrize(("counter", "key", "expected"), [  # Random123's kat_vectors for philox4x32_10
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_torch_philox_gives_the_known_answers(counter, key, expected):
    got = dm.philox_rounds(_words(*counter), _words(*key))
    assert tuple(int(w) for w in got) == expected


@pytest.mark.parametrize(("shape", "head_offset", "p"), [((2, 3, 9, 21), 0, 0.3), ((1, 2, 17, 40), 5, 0.1),
                                                         ((2, 1, 33, 64), 7, 0.5)])
def test_the_torch_mask_is_the_kernels_mask(shape, head_offset, p):
    seed = torch.tensor([123456789012345], dtype=torch.int64, device=DEVICE)
    kernel = fa.keep_mask(seed, shape, p, head_offset)
    torch.testing.assert_close(dm.keep_mask(seed, shape, p, head_offset), kernel, rtol=0, atol=0)
    assert abs((1 - kernel.double().mean().item()) - p) < 0.06


@pytest.mark.parametrize("build", ["kernel", "torch"])
def test_tp2_ranks_draw_the_masks_tp1_draws_for_their_heads(build):
    mask = fa.keep_mask if build == "kernel" else dm.keep_mask
    b, heads, sq, sk, p = 2, 8, 24, 40, 0.2
    seed = torch.tensor([2**40 + 12345], dtype=torch.int64, device=DEVICE)
    tp1 = mask(seed, (b, heads, sq, sk), p)
    ranks = [mask(seed, (b, heads // 2, sq, sk), p, rank * heads // 2) for rank in range(2)]
    assert torch.equal(torch.cat(ranks, dim=1), tp1)
    assert not torch.equal(ranks[0], ranks[1])  # two ranks' heads are different heads: different masks
    assert not torch.equal(ranks[1], mask(seed, (b, heads // 2, sq, sk), p))  # the offset is what keys them


def _inputs(b, heads, s, hd, seed):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, heads, s, hd, generator=gen).to(DEVICE) for _ in range(3)]


def _out_and_grads(fn, inputs, upstream):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    return [out, *torch.autograd.grad((out * upstream).sum(), leaves)]


@pytest.mark.parametrize("path", ["flash", "cpu-reference"])
def test_tp2_ranks_compute_the_tp1_slice_with_dropout(path):
    """Each rank's output and gradients (its heads, their global slopes, the run's RNG state) are the slice of the
    TP 1 call's: the same probabilities are dropped."""
    b, heads, s, hd, p = 2, 4, 40, 16, 0.3
    q, k, v = _inputs(b, heads, s, hd, seed=1)
    upstream = torch.randn(b, heads, s, hd, generator=torch.Generator().manual_seed(2)).to(DEVICE)
    slopes = alibi_slopes(heads).to(DEVICE)

    def call(part: slice, offset: int):
        def attention(q, k, v):
            if path == "flash":
                return fa.flash_attention(q, k, v, slopes[part], 0.25, p, head_offset=offset)
            return attention_reference(q, k, v, slopes[part], 0.25, None, p, softmax=alibi_softmax_reference,
                                       head_offset=offset)
        torch.manual_seed(5)  # every TP rank of a data-parallel rank holds the same generator state
        return _out_and_grads(attention, [t[:, part] for t in (q, k, v)], upstream[:, part])

    full = call(slice(0, heads), 0)
    for rank in range(2):
        part = slice(rank * heads // 2, (rank + 1) * heads // 2)
        for got, want in zip(call(part, part.start), full):
            torch.testing.assert_close(got, want[:, part], rtol=1e-6, atol=1e-6)
    dropped_alike = call(slice(heads // 2, heads), 0)[0]  # keyed by the local head: rank 0's masks, wrong here
    assert not torch.allclose(dropped_alike, full[0][:, heads // 2:], rtol=1e-6, atol=1e-6)


def test_the_cpu_path_replays_with_the_rng_state_and_keeps_the_expectation():
    probs = torch.full((2, 4, 64, 64), 0.5, dtype=torch.float64)
    torch.manual_seed(3)
    first = dm.apply_dropout(probs, 0.25)
    torch.manual_seed(3)
    assert torch.equal(dm.apply_dropout(probs, 0.25), first)
    assert not torch.equal(dm.apply_dropout(probs, 0.25), first)
    kept = first != 0
    torch.testing.assert_close(first[kept], torch.full_like(first[kept], 0.5 * dm.dropout_scale(0.25)))
    assert abs(first.mean().item() - 0.5) < 0.02  # 32,768 draws
