"""CUDA side of the fused kernels: an nvcc compile check that runs without a GPU, and gpu-marked
parity tests against the PyTorch references.

The self-check that "auto" and "fused" run on first use must pass on the GPU in every CUDA dtype (its tolerances are
in bloomtrain/kernels/selfcheck.py).

Tolerances on the GPU: fp32 rtol = atol = 2e-6 (the kernels use the fast-math intrinsics
``__expf``/``rsqrtf``, about 2 ulp, where the CPU kernels are within 1e-6); bf16 within 2 bf16 ulps
(rtol 1.6e-2) + atol 1e-2 of the fp64 ground truth.
"""

from __future__ import annotations

import glob
import logging
import shutil
import subprocess

import pytest
import torch

from bloomtrain.kernels import build, fallback, get_kernels, selfcheck
from bloomtrain.kernels.alibi_softmax import alibi_softmax_reference
from bloomtrain.kernels.bias_gelu import bias_gelu_reference
from bloomtrain.model.alibi import alibi_slopes

FP32 = {"rtol": 2e-6, "atol": 2e-6}
BF16 = {"rtol": 1.6e-2, "atol": 1e-2}


def _nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/local/cuda*/bin/nvcc"))
    return candidates[-1] if candidates else None


@pytest.mark.integration
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cuda_sources_compile_with_nvcc(arch, tmp_path):
    """The .cu files are self-contained (no torch headers), so nvcc checks them on CPU-only CI."""
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found on PATH or under /usr/local/cuda*/bin: cannot compile-check the CUDA kernels")
    procs = {
        src: subprocess.Popen(
            [nvcc, "-c", "-std=c++17", f"-arch={arch}", "-O3", "--expt-relaxed-constexpr", "-Werror=all-warnings",
             str(build.source_dir() / src), "-o", str(tmp_path / f"{src}.o")],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for src in build.CUDA_SOURCES
    }
    failures = {src: p.communicate(timeout=300)[0] for src, p in procs.items()}
    failures = {src: out for src, out in failures.items() if procs[src].returncode != 0}
    assert not failures, "nvcc failed:\n" + "\n".join(f"--- {s}\n{o}" for s, o in failures.items())
    assert all((tmp_path / f"{src}.o").stat().st_size > 0 for src in build.CUDA_SOURCES)


@pytest.fixture(scope="module")
def cuda_ext():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    module, reason = build.extension_for("cuda")
    assert module is not None, f"CUDA kernel build failed: {reason}"
    assert module.built_with_cuda()
    return module


def _check(fn_fused, fn_ref, inputs, tol, truth_dtype=None):
    a = [t.detach().clone().requires_grad_(True) for t in inputs]
    b = [t.detach().clone().to(truth_dtype or t.dtype).requires_grad_(True) for t in inputs]
    out_a, out_b = fn_fused(*a), fn_ref(*b)
    torch.testing.assert_close(out_a, out_b.to(out_a.dtype), **tol)
    g = torch.randn(out_a.shape, device=out_a.device, generator=torch.Generator(out_a.device).manual_seed(1))
    rows = inputs[0].numel() // inputs[0].shape[-1]
    for ga, gb in zip(torch.autograd.grad(out_a, a, g.to(out_a.dtype)),
                      torch.autograd.grad(out_b, b, g.to(out_b.dtype))):
        scaled = dict(tol, atol=tol["atol"] * rows**0.5) if ga.dim() == 1 else tol
        torch.testing.assert_close(ga, gb.to(ga.dtype), **scaled)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(4, 1), (3, 129), (2, 7, 1000), (64, 4096), (8, 14336)])
def test_cuda_layer_norm(cuda_ext, shape, dtype):
    gen = torch.Generator("cuda").manual_seed(0)
    x = (torch.randn(shape, device="cuda", generator=gen) * 3 + 1).to(dtype)
    w = torch.randn(shape[-1:], device="cuda", generator=gen).to(dtype)
    b = torch.randn(shape[-1:], device="cuda", generator=gen).to(dtype)

    def truth(x, w, b):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, 1e-5)

    tol = FP32 if dtype == torch.float32 else BF16
    _check(lambda x, w, b: get_kernels("fused").layer_norm(x, w, b, 1e-5), truth, (x, w, b), tol, torch.float64)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (2, 9, 129), (16, 4096), (4, 3, 1001)])
def test_cuda_bias_gelu(cuda_ext, shape, dtype):
    gen = torch.Generator("cuda").manual_seed(2)
    x = (torch.randn(shape, device="cuda", generator=gen) * 3).to(dtype)
    bias = torch.randn(shape[-1:], device="cuda", generator=gen).to(dtype)
    tol = FP32 if dtype == torch.float32 else BF16
    _check(get_kernels("fused").bias_gelu, bias_gelu_reference, (x, bias), tol, torch.float64)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(
    ("b", "heads", "sq", "sk"),
    [(1, 1, 1, 1), (2, 3, 5, 9), (1, 5, 33, 33), (2, 12, 128, 128), (1, 3, 7, 4), (1, 1, 1, 8192),
     (1, 2, 2048, 2048), (1, 1, 8192, 8192), (1, 1, 2, 16384)],
)
def test_cuda_alibi_softmax(cuda_ext, b, heads, sq, sk, dtype):
    gen = torch.Generator("cuda").manual_seed(3)
    scores = (torch.randn(b, heads, sq, sk, device="cuda", generator=gen) * 4).to(dtype)
    slopes = alibi_slopes(heads).cuda()
    tol = FP32 if dtype == torch.float32 else BF16
    _check(lambda s: get_kernels("fused").alibi_softmax(s, slopes, 0.125),
           lambda s: alibi_softmax_reference(s, slopes, 0.125), (scores,), tol,
           torch.float32 if dtype == torch.float32 else torch.float64)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_softmax_too_long_falls_back(cuda_ext, caplog):
    fallback.log_fallback.cache_clear()
    sk = cuda_ext.cuda_softmax_max_keys() + 1
    scores, slopes = torch.randn(1, 1, 1, sk, device="cuda"), alibi_slopes(1).cuda()
    with caplog.at_level(logging.WARNING, logger="bloomtrain.kernels"):
        out = get_kernels("fused").alibi_softmax(scores, slopes, 1.0)
    torch.testing.assert_close(out, alibi_softmax_reference(scores, slopes, 1.0))
    assert sum("at most" in r.getMessage() for r in caplog.records) == 1
    fallback.log_fallback.cache_clear()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_cuda_selfcheck_passes_and_auto_runs_the_fused_kernels(cuda_ext, dtype):
    from bloomtrain.model.bloom import BloomModel  # noqa: PLC0415
    from bloomtrain.model.config import ModelConfig  # noqa: PLC0415

    selfcheck.reset()
    try:
        config = ModelConfig.tiny(num_heads=4, seq_length=136, kernels="auto")
        ids = torch.randint(0, config.vocab_size, (2, 136), device="cuda")
        logits = BloomModel(config, dtype=dtype, device="cuda")(ids)
        results = selfcheck.check(torch.device("cuda"), dtype)
        assert {k: r.reason for k, r in results.items() if not r.fused} == {}
        assert all(r.device_name == torch.cuda.get_device_name() and r.tolerance_used <= 1 for r in results.values())
        names, seen, stack = set(), set(), [logits.grad_fn]  # every autograd node: the kernels the forward ran
        while stack:
            fn = stack.pop()
            if fn is not None and fn not in seen:
                seen.add(fn)
                names.add(fn.name())
                stack.extend(f for f, _ in fn.next_functions)
        assert {"FusedLayerNormFunctionBackward", "FusedBiasGeLUFunctionBackward"} <= names
        assert any("flash_alibi_attention" in n for n in names), names  # auto's attention on CUDA: the flash kernel
    finally:
        selfcheck.reset()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(("b", "heads", "s", "hd"), [(4, 16, 2048, 64), (2, 16, 2048, 128), (1, 2, 4096, 80)])
@pytest.mark.parametrize("dropout_p", [0.0, 0.1])
def test_cuda_flash_attention_at_training_shapes(b, heads, s, hd, dropout_p):
    """bf16 flash attention against the fp32 reference on the same inputs, given the kernel's own dropout mask."""
    from bloomtrain.kernels.flash_attention import dropout_scale, flash_attention, keep_mask  # noqa: PLC0415

    gen = torch.Generator("cuda").manual_seed(4)
    q, k, v, g = (torch.randn(b, heads, s, hd, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(4))
    slopes = alibi_slopes(heads).cuda()
    seed = torch.tensor([20261127], device="cuda")

    def ours(q, k, v):
        return flash_attention(q, k, v, slopes, hd ** -0.5, dropout_p, seed=seed)

    def truth(q, k, v):
        probs = alibi_softmax_reference(torch.matmul(q, k.transpose(-1, -2)), slopes, hd ** -0.5)
        if dropout_p:
            probs = probs * keep_mask(seed, (b, heads, s, s), dropout_p) * dropout_scale(dropout_p)
        return torch.matmul(probs, v)

    a = [t.clone().requires_grad_(True) for t in (q, k, v)]
    r = [t.float().requires_grad_(True) for t in (q, k, v)]
    out_a, out_r = ours(*a), truth(*r)
    for name, x, y in zip(("out", "dq", "dk", "dv"), (out_a, *torch.autograd.grad(out_a, a, g)),
                          (out_r, *torch.autograd.grad(out_r, r, g.float()))):
        scale = y.abs().max().item()
        torch.testing.assert_close(x.float(), y, rtol=1.6e-2, atol=1e-2 * scale, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_flash_attention_keeps_no_square():
    """Forward + backward at [4, 16, 8192, 64] bf16: the [s, s] scores alone would be 8 GiB."""
    from bloomtrain.kernels.flash_attention import flash_attention  # noqa: PLC0415

    q, k, v = (torch.randn(4, 16, 8192, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = flash_attention(q, k, v, alibi_slopes(16).cuda(), 0.125, 0.1)
    out.sum().backward()
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - before < 1 << 30  # inputs' grads, out, lse: ~0.5 GiB


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_flash_attention_launches_any_batch_times_heads():
    """b x np = 70,000 (the grid's second dimension stopped at 65,535 when it held them) and TP-style head offsets:
    output and gradients against the fp32 reference with the kernel's own mask."""
    from bloomtrain.kernels.flash_attention import dropout_scale, flash_attention, keep_mask  # noqa: PLC0415

    b, heads, s, hd, p = 7000, 10, 16, 32, 0.1
    gen = torch.Generator("cuda").manual_seed(5)
    q, k, v, g = (torch.randn(b, heads, s, hd, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(4))
    slopes = alibi_slopes(2 * heads)[heads:].cuda()  # TP 2's second rank: heads 10-19
    seed = torch.tensor([7], device="cuda")
    a = [t.clone().requires_grad_(True) for t in (q, k, v)]
    out_a = flash_attention(*a, slopes, hd ** -0.5, p, seed=seed, head_offset=heads)
    r = [t.float().requires_grad_(True) for t in (q, k, v)]
    probs = alibi_softmax_reference(torch.matmul(r[0], r[1].transpose(-1, -2)), slopes, hd ** -0.5)
    out_r = torch.matmul(probs * keep_mask(seed, (b, heads, s, s), p, heads) * dropout_scale(p), r[2])
    for name, x, y in zip(("out", "dq", "dk", "dv"), (out_a, *torch.autograd.grad(out_a, a, g)),
                          (out_r, *torch.autograd.grad(out_r, r, g.float()))):
        scale = y.abs().max().item()
        torch.testing.assert_close(x.float(), y, rtol=1.6e-2, atol=1e-2 * scale, msg=lambda m, n=name: f"{n}: {m}")
