"""The Triton flash ALiBi attention (bloomtrain.kernels.flash_attention) against the PyTorch reference.

Without a GPU the kernels run in Triton's CPU interpreter (``TRITON_INTERPRET=1``, set by tests/conftest.py before
any module imports triton): the same kernel code, block loops, masks and Philox streams as on CUDA, on CPU tensors. The
tile shapes there are small and differ per kernel (``flash_attention.plan``), so every test crosses block edges, the
diagonal blocks and the padded tails of rows, keys and head dims.

Tolerances: fp32 rtol = atol = 1e-5 of the largest entry (the kernel sums in another order than the reference);
bf16/fp16 within 2 ulps + 1e-2 / 1e-3 of the largest entry of an fp64 truth, as the self-check's.
With dropout the reference gets the kernel's own keep mask (``keep_mask``) and scale (``dropout_scale``).
"""

from __future__ import annotations

import logging
import os

import pytest
import torch

from bloomtrain.kernels import flash_attention as fa
from bloomtrain.kernels.alibi_softmax import alibi_softmax_reference
from bloomtrain.kernels.attention import attention_reference
from bloomtrain.kernels.flash_attention import dropout_scale, flash_attention, flash_problem, keep_mask
from bloomtrain.model.alibi import alibi_slopes

# tests/conftest.py chose the interpreter before triton was first imported (DeepSpeed imports it too).
assert torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1", "run under tests/conftest.py"

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
TOL = {torch.float32: (1e-5, 1e-5), torch.bfloat16: (1.6e-2, 1e-2), torch.float16: (2e-3, 1e-3)}


def _inputs(b, heads, sq, sk, hd, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, heads, s, hd, generator=gen, dtype=torch.float64) for s in (sq, sk, sk))
    return [t.to(DEVICE, dtype) for t in (q, k, v)]


def _reference(q, k, v, slopes, scale, keep=None, p=0.0):
    probs = alibi_softmax_reference(torch.matmul(q, k.transpose(-1, -2)), slopes, scale)
    if keep is not None:
        probs = probs * keep.to(probs.dtype) * dropout_scale(p)
    return torch.matmul(probs, v)


def _run(fn, inputs, upstream):
    leaves = [t.detach().clone().requires_grad_(True) for t in inputs]
    out = fn(*leaves)
    grads = torch.autograd.grad((out * upstream.to(out.dtype)).sum(), leaves)
    return [out, *grads]


def _assert_close(got, want, dtype):
    rtol, atol = TOL[dtype]
    for name, x, y in zip(("out", "dq", "dk", "dv"), got, want):
        x, y = x.double(), y.double()
        scale = y.abs().max().item()
        torch.testing.assert_close(x, y, rtol=rtol, atol=atol * scale, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize(("b", "heads", "sq", "sk", "hd"), [
    (2, 3, 50, 50, 64),    # rows and keys end inside a tile
    (1, 2, 96, 96, 128),   # BLOOM-176B's head dim
    (1, 2, 37, 37, 80),    # bloom-3b's head dim: padded to 128 inside
    (1, 2, 7, 45, 32),     # fewer queries than keys: row i sits at key 38 + i (KV cache, evaluation)
    (2, 2, 1, 33, 64),     # one generation step
])
def test_fp32_equals_the_reference(b, heads, sq, sk, hd):
    q, k, v = _inputs(b, heads, sq, sk, hd, torch.float32)
    slopes = alibi_slopes(heads).to(DEVICE)
    scale = hd ** -0.5
    upstream = torch.randn(b, heads, sq, hd, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    got = _run(lambda q, k, v: flash_attention(q, k, v, slopes, scale), (q, k, v), upstream)
    want = _run(lambda q, k, v: _reference(q, k, v, slopes, scale), (q, k, v), upstream)
    _assert_close(got, want, torch.float32)
    # The project's reference composition (attention_reference) gives the same.
    full = attention_reference(q, k, v, slopes, scale, softmax=alibi_softmax_reference)
    torch.testing.assert_close(got[0], full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_is_within_two_ulps_of_the_fp64_truth(dtype):
    b, heads, s, hd = 1, 4, 70, 64
    q, k, v = _inputs(b, heads, s, s, hd, dtype, seed=2)
    slopes = alibi_slopes(heads).to(DEVICE)
    upstream = torch.randn(b, heads, s, hd, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    got = _run(lambda q, k, v: flash_attention(q, k, v, slopes, 0.125), (q, k, v), upstream)
    want = _run(lambda q, k, v: _reference(q, k, v, slopes.double(), 0.125),
                [t.double() for t in (q, k, v)], upstream.double())
    _assert_close(got, want, dtype)
    assert all(t.dtype == dtype for t in got)


@pytest.mark.parametrize(("p", "sq", "sk"), [(0.1, 64, 64), (0.5, 45, 45), (0.3, 9, 40)])
def test_dropout_equals_the_reference_given_the_same_mask(p, sq, sk):
    b, heads, hd = 2, 2, 32
    q, k, v = _inputs(b, heads, sq, sk, hd, torch.float32, seed=4)
    slopes = alibi_slopes(heads).to(DEVICE)
    seed = torch.tensor([123456789012], dtype=torch.int64, device=DEVICE)
    keep = keep_mask(seed, (b, heads, sq, sk), p)
    upstream = torch.randn(b, heads, sq, hd, generator=torch.Generator().manual_seed(5)).to(DEVICE)
    got = _run(lambda q, k, v: flash_attention(q, k, v, slopes, 0.2, p, seed=seed), (q, k, v), upstream)
    want = _run(lambda q, k, v: _reference(q, k, v, slopes, 0.2, keep, p), (q, k, v), upstream)
    _assert_close(got, want, torch.float32)
    # A mask that differs in one kept key of an attended position gives another output: the test can fail.
    i = sq - 1
    j = int(keep[0, 0, i].nonzero()[0])
    other = keep.clone()
    other[0, 0, i, j] = False
    assert not torch.allclose(_reference(q, k, v, slopes, 0.2, other, p), got[0], rtol=1e-5, atol=1e-5)


def test_the_mask_is_a_fair_philox_stream_of_the_seed():
    shape = (2, 4, 128, 256)
    seed = torch.tensor([7], dtype=torch.int64, device=DEVICE)
    keep = keep_mask(seed, shape, 0.1)
    dropped = 1 - keep.double().mean().item()
    assert abs(dropped - 0.1) < 0.005  # 262,144 draws: 5 standard deviations are 0.003
    assert torch.equal(keep, keep_mask(seed.clone(), shape, 0.1))  # a seed replays its mask
    assert not torch.equal(keep, keep_mask(seed + 1, shape, 0.1))
    flat = keep.view(8, -1)
    assert all(not torch.equal(flat[0], flat[h]) for h in range(1, 8))  # every (batch, head) its own stream
    assert keep_mask(seed, shape, 0.0).all() and dropout_scale(0.0) == 1.0


def test_seeds_come_from_the_device_generator():
    q, k, v = _inputs(1, 2, 40, 40, 16, torch.float32)
    slopes = alibi_slopes(2).to(DEVICE)
    torch.manual_seed(11)
    first = flash_attention(q, k, v, slopes, 0.25, 0.2)
    second = flash_attention(q, k, v, slopes, 0.25, 0.2)
    torch.manual_seed(11)
    assert torch.equal(flash_attention(q, k, v, slopes, 0.25, 0.2), first)  # a restored RNG state replays it
    assert not torch.equal(first, second)


def test_strided_inputs_and_the_output_layout():
    """q, k, v as the model makes them (views of one [b, s, np, 3, hd] projection): no copy, same result."""
    b, s, heads, hd = 2, 40, 3, 32
    qkv = torch.randn(b, s, heads, 3, hd, generator=torch.Generator().manual_seed(6)).to(DEVICE)
    q, k, v = (t.transpose(1, 2) for t in qkv.unbind(dim=3))
    slopes = alibi_slopes(heads).to(DEVICE)
    out = flash_attention(q, k, v, slopes, 0.25)
    torch.testing.assert_close(out, flash_attention(q.contiguous(), k.contiguous(), v.contiguous(), slopes, 0.25))
    assert out.transpose(1, 2).is_contiguous()  # [b, sq, np, hd] in memory: the model's [b, s, h] view is free


def test_tp_sharded_heads_equal_the_slice_of_all_heads():
    b, heads, s, hd = 1, 8, 48, 32
    q, k, v = _inputs(b, heads, s, s, hd, torch.float32, seed=8)
    full = flash_attention(q, k, v, alibi_slopes(heads).to(DEVICE), 0.3)
    for rank in range(2):  # TP = 2: each rank holds 4 heads with their global slopes
        part = slice(4 * rank, 4 * rank + 4)
        local = flash_attention(q[:, part], k[:, part], v[:, part], alibi_slopes(heads)[part].to(DEVICE), 0.3)
        torch.testing.assert_close(local, full[:, part], rtol=1e-6, atol=1e-6)


def test_calls_the_kernel_cannot_serve_are_named():
    q, k, v = _inputs(1, 2, 8, 8, 16, torch.float32)
    slopes = alibi_slopes(2).to(DEVICE)
    assert flash_problem(q, k, v, slopes, None) is None
    assert "padding mask" in flash_problem(q, k, v, slopes, torch.zeros(1, 1, 8, 8, dtype=torch.bool))
    assert "more queries than keys" in flash_problem(q, k[:, :, :4], v[:, :, :4], slopes, None)
    assert "dtype" in flash_problem(q.double(), k.double(), v.double(), slopes, None)
    assert "head dim" in flash_problem(*(t.new_zeros(1, 2, 8, 512) for t in (q, k, v)), slopes, None)


def _model_layout_view(buffer: torch.Tensor, b: int, s: int, heads: int, hd: int, batch_stride: int):
    """q, k, v as the model makes them ([b, s, np, 3, hd] projection rows) in ``buffer``, batch entry i at element
    ``i * batch_stride``: offsets past 2^31 elements with strides that each fit in 32 bits."""
    row = heads * 3 * hd
    return [buffer.as_strided((b, heads, s, hd), (batch_stride, 3 * hd, row, 1), j * hd) for j in range(3)]


def test_offsets_past_two_to_the_31_elements():
    """Batch entry 2 starts at element 2^31 + 2^21: a 32-bit offset would wrap (and read another address). The
    buffer is virtual memory: only the rows the test writes are touched (~50 KB of a 4 GB allocation)."""
    b, s, heads, hd = 3, 24, 2, 16
    batch_stride = 2**30 + 2**20
    buffer = torch.empty(2 * batch_stride + s * heads * 3 * hd, dtype=torch.float16)
    gen = torch.Generator().manual_seed(9)
    for i in range(b):
        buffer[i * batch_stride:i * batch_stride + s * heads * 3 * hd] = torch.randn(s * heads * 3 * hd, generator=gen)
    q, k, v = _model_layout_view(buffer, b, s, heads, hd, batch_stride)
    assert q.storage_offset() + 2 * q.stride(0) > 2**31 and max(q.stride()) < 2**31
    slopes = alibi_slopes(heads)
    seed = torch.tensor([77], dtype=torch.int64)
    upstream = torch.randn(b, heads, s, hd, generator=gen).half()

    def forward_backward(q, k, v):  # the ops themselves: autograd would copy the views (clone makes them dense)
        out, lse = fa._attention_op(q, k, v, slopes, seed, 0.25, 0.2, 0)
        return [out, *fa._attention_backward_op(upstream, q, k, v, out, lse, slopes, seed, 0.25, 0.2, 0)]

    got = forward_backward(q, k, v)
    want = forward_backward(*(t.contiguous() for t in (q, k, v)))
    for x, y in zip(got, want):
        assert torch.equal(x, y)


def test_any_batch_times_heads_launches(monkeypatch):
    """b x np = 70,000 programs per query tile: every launch keeps dimensions 1 and 2 of its grid within CUDA's
    65,535 (the kernels are recorded, not run: the interpreter would take minutes; tests/bloomtrain/
    test_kernels_cuda.py launches them on a GPU)."""
    from bloomtrain.kernels import flash_triton  # noqa: PLC0415

    grids: list[tuple[int, ...]] = []

    class Recorder:
        def __getitem__(self, grid):
            grids.append(tuple(grid))
            return lambda *args, **kwargs: None

    for name in ("attention_fwd_kernel", "attention_bwd_dq_kernel", "attention_bwd_dkdv_kernel"):
        monkeypatch.setattr(flash_triton, name, Recorder())
    q = torch.zeros(7000, 10, 1, 16)
    slopes = alibi_slopes(10)
    out, lse = fa._forward(q, q, q, slopes, torch.zeros(1, dtype=torch.int64), fa.Call(0.25, 0.0))
    fa._backward(q, (q, q, q, out, lse, slopes, torch.zeros(1, dtype=torch.int64)), fa.Call(0.25, 0.0))
    assert len(grids) == 3
    for grid in grids:
        assert grid[0] * grid[1] * grid[2] == 70_000 and max(grid[1:]) <= 65_535, grid


def test_a_launch_out_of_resources_takes_the_plans_next_tiles(monkeypatch, caplog):
    """The forward's first tiles "run out of shared memory" (as a too-large plan does on a 99 KiB card): the call
    takes the plan's next tiles, with one warning for the two calls, and gives the reference's result."""
    from bloomtrain.kernels import flash_plans, flash_triton  # noqa: PLC0415

    real = flash_triton.attention_fwd_kernel
    first = flash_plans.INTERPRETER_PLAN.fwd[0]
    used: list[int] = []

    class Small:  # a device whose shared memory the first tiles overflow
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                used.append(kwargs["BLOCK_M"])
                if kwargs["BLOCK_M"] == first.block_m and kwargs["BLOCK_N"] == first.block_n:
                    raise flash_triton.OutOfResources(232_448, 101_376, "shared memory")
                return real[grid](*args, **kwargs)
            return launch

    monkeypatch.setattr(flash_triton, "attention_fwd_kernel", Small())
    monkeypatch.setattr(fa, "_CHOSEN", {})
    q, k, v = _inputs(1, 2, 40, 40, 16, torch.float32)
    slopes = alibi_slopes(2).to(DEVICE)
    with caplog.at_level(logging.WARNING, logger="bloomtrain.kernels"):
        outs = [flash_attention(q, k, v, slopes, 0.25) for _ in range(2)]
    warnings = [r.getMessage() for r in caplog.records if "do not fit" in r.getMessage()]
    assert len(warnings) == 1 and str(first) in warnings[0] and str(flash_plans.INTERPRETER_PLAN.fwd[1]) in warnings[0]
    assert used == [first.block_m, flash_plans.INTERPRETER_PLAN.fwd[1].block_m,
                    flash_plans.INTERPRETER_PLAN.fwd[1].block_m]  # the second call starts at the tiles that fit
    for out in outs:
        torch.testing.assert_close(out, _reference(q, k, v, slopes, 0.25), rtol=1e-5, atol=1e-5)


def test_the_self_check_runs_at_the_models_head_dim(monkeypatch):
    """``use_flash`` checks the kernel at the call's head dim, once per head dim (the interpreter runs it here)."""
    from bloomtrain.kernels import selfcheck  # noqa: PLC0415

    selfcheck.reset()
    try:
        result = selfcheck.check_flash(torch.device(DEVICE), torch.float32, 64)
        assert result.fused and result.head_dim == 64 and result.tolerance_used <= 1, result
        assert selfcheck.check_flash(torch.device(DEVICE), torch.float32, 64) is result  # cached
        assert [r["head_dim"] for r in selfcheck.selfcheck_report() if r["kernel"] == "flash_attention"] == [64]
        asked: list[int] = []
        monkeypatch.setattr(selfcheck, "check_flash", lambda device, dtype, hd: asked.append(hd) or result)
        q, k, v = _inputs(1, 2, 8, 8, 128, torch.float32)
        assert selfcheck.use_flash(q, k, v, alibi_slopes(2).to(DEVICE), None, strict=True)
        assert asked == [128]
    finally:
        selfcheck.reset()
