"""Fused CPU kernels (csrc/kernels) against their PyTorch references, plus dispatch and fallback.

Tolerances:
- fp32: rtol = atol = 1e-6 against the fp32 reference (both accumulate in fp32).
- bf16 (documented): outputs and input gradients within 2 bf16 ulps (rtol 1.6e-2) + atol 1e-2 of
  the bf16 reference, and never less accurate than the bf16 reference against an fp64 ground
  truth (the fused kernels round once from fp32; the reference rounds after each op).
- fp64: torch.autograd.gradcheck of the fused autograd Functions (CPU kernels accumulate in fp64).

Every kernel test runs once per CPU build the machine can run (``isa``: the baseline build, and the
AVX2 + FMA one on x86-64 CPUs that have it). The extension is built once per session (about 1 minute on
2 cores) into the shared cache. The first-use self-check behind "auto" and "fused" (and the build-failure
paths) is tested in test_kernel_selfcheck.py.
"""

from __future__ import annotations

import logging
import os
import site
import subprocess
import sys
import venv
from pathlib import Path

import pytest
import torch

from bloomtrain.kernels import build, fallback, get_kernels
from bloomtrain.kernels.alibi_softmax import (
    FusedAlibiSoftmaxFunction,
    alibi_softmax_reference,
    fused_alibi_softmax,
)
from bloomtrain.kernels.attention import BLOCK_ROWS, MAX_BLOCKS, attention_reference, block_bounds
from bloomtrain.kernels.bias_gelu import FusedBiasGeLUFunction, bias_gelu_reference
from bloomtrain.kernels.layer_norm import FusedLayerNormFunction, layer_norm_reference
from bloomtrain.model.alibi import alibi_slopes

FP32 = {"rtol": 1e-6, "atol": 1e-6}
BF16 = {"rtol": 1.6e-2, "atol": 1e-2}


def _layer_norm_fp64(x, w, b, eps):
    """Ground truth: F.layer_norm in the inputs' dtype (the reference always computes in fp32)."""
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps)


@pytest.fixture(scope="session")
def ext():
    module, reason = build.try_load(False)
    assert module is not None, f"CPU kernel build failed: {reason}"
    return module


def _cpu_isas() -> list[str]:
    module, _ = build.try_load(False)
    if module is None:
        return ["baseline"]
    try:
        old = module.set_cpu_isa("avx2+fma")
    except RuntimeError:  # no AVX2 + FMA on this CPU
        return ["baseline"]
    module.set_cpu_isa(old)
    return ["baseline", "avx2+fma"]


@pytest.fixture(scope="session", params=_cpu_isas())
def isa(ext, request):
    old = ext.set_cpu_isa(request.param)
    yield request.param
    ext.set_cpu_isa(old)


@pytest.fixture(scope="session")
def fused(isa):
    return get_kernels("fused")


def _grads(out: torch.Tensor, inputs: tuple[torch.Tensor, ...], seed: int = 1) -> list[torch.Tensor]:
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out.dtype)
    return list(torch.autograd.grad(out, inputs, g))


def _leaf(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone().requires_grad_(True)


def _compare(fn_fused, fn_ref, inputs, tol, ref_dtype: torch.dtype | None = None) -> None:
    """Forward and every input gradient of the fused op against the reference.

    ref_dtype=float64 runs the reference in fp64 as ground truth (cast back for the comparison):
    the fp32 references are themselves off by up to ~1e-5 where they cancel (LayerNorm's x - mean
    at hidden 1; GeLU's 1 - tanh^2 in autograd at |x| ~ 5), which the kernels avoid.
    """
    a = [_leaf(t) for t in inputs]
    b = [_leaf(t if ref_dtype is None else t.to(ref_dtype)) for t in inputs]
    out_a, out_b = fn_fused(*a), fn_ref(*b)
    torch.testing.assert_close(out_a, out_b.to(out_a.dtype), **tol)
    rows = inputs[0].numel() // max(inputs[0].shape[-1], 1)
    for ga, gb in zip(_grads(out_a, tuple(a)), _grads(out_b, tuple(b))):
        # weight/bias gradients are sums over all rows: rounding grows like sqrt(rows) ulps.
        scaled = dict(tol, atol=tol["atol"] * rows**0.5) if ga.dim() == 1 and inputs[0].dim() > 1 else tol
        torch.testing.assert_close(ga, gb.to(ga.dtype), **scaled)


# ---------------------------------------------------------------- LayerNorm


@pytest.mark.parametrize("shape", [(4, 1), (3, 3), (2, 5, 129), (7, 1000), (64, 1000)])
def test_layer_norm_fp32_matches_reference(fused, shape):
    # (64, 1000) is above the parallel grain: covers the per-thread dweight/dbias partial sums.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen) * 3 + 1
    w, b = torch.randn(shape[-1:], generator=gen), torch.randn(shape[-1:], generator=gen)
    _compare(lambda x, w, b: fused.layer_norm(x, w, b, 1e-5), lambda x, w, b: _layer_norm_fp64(x, w, b, 1e-5),
             (x, w, b), FP32, ref_dtype=torch.float64)


@pytest.mark.parametrize("weight_dtype", [torch.bfloat16, torch.float32])
def test_layer_norm_bf16_matches_reference(fused, weight_dtype):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(6, 257, generator=gen).bfloat16()
    w = (1 + 0.1 * torch.randn(257, generator=gen)).to(weight_dtype)
    b = (0.1 * torch.randn(257, generator=gen)).to(weight_dtype)
    _compare(lambda x, w, b: fused.layer_norm(x, w, b, 1e-5), lambda x, w, b: layer_norm_reference(x, w, b, 1e-5),
             (x, w, b), BF16)
    _compare(lambda x, w, b: fused.layer_norm(x, w, b, 1e-5), lambda x, w, b: _layer_norm_fp64(x, w, b, 1e-5),
             (x, w, b), BF16, ref_dtype=torch.float64)


def test_layer_norm_fp16_forward(fused):
    x = torch.randn(5, 96, generator=torch.Generator().manual_seed(2)).half()
    w, b = torch.ones(96, dtype=torch.half), torch.zeros(96, dtype=torch.half)
    torch.testing.assert_close(fused.layer_norm(x, w, b, 1e-5), layer_norm_reference(x, w, b, 1e-5),
                               rtol=1e-3, atol=1e-3)


# ---------------------------------------------------------------- bias + GeLU


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 3, 129), (9, 1000), (64, 1000)])
def test_bias_gelu_fp32_matches_reference(fused, shape):
    gen = torch.Generator().manual_seed(3)
    x, bias = torch.randn(shape, generator=gen) * 3, torch.randn(shape[-1:], generator=gen)
    _compare(fused.bias_gelu, bias_gelu_reference, (x, bias), FP32, ref_dtype=torch.float64)


def test_bias_gelu_extreme_inputs(fused):
    # Saturated tanh on both sides and zero: exercises the clamped exp of the vectorized tanh.
    x = torch.tensor([[-1e4, -50.0, -9.0, -1e-4, 0.0, 1e-4, 9.0, 50.0, 1e4]])
    _compare(fused.bias_gelu, bias_gelu_reference, (x, torch.zeros(9)), FP32, ref_dtype=torch.float64)


def test_bias_gelu_bf16_at_least_as_accurate_as_reference(fused):
    gen = torch.Generator().manual_seed(4)
    x64, b64 = torch.randn(16, 384, generator=gen, dtype=torch.float64) * 2, torch.randn(384, dtype=torch.float64,
                                                                                          generator=gen)
    x, b = x64.bfloat16(), b64.bfloat16()
    _compare(fused.bias_gelu, bias_gelu_reference, (x, b), BF16, ref_dtype=torch.float64)
    truth = bias_gelu_reference(x.double(), b.double())
    err_fused = (fused.bias_gelu(x, b).double() - truth).abs().max()
    err_ref = (bias_gelu_reference(x, b).double() - truth).abs().max()
    assert err_fused <= err_ref


# ---------------------------------------------------------------- ALiBi causal softmax


@pytest.mark.parametrize(
    ("b", "heads", "sq", "sk"),
    [
        (1, 1, 1, 1),
        (2, 3, 5, 9),  # sq < sk: query row i sits at key sk - sq + i (KV-cache prefix)
        (1, 5, 33, 33),  # non-power-of-two heads: slopes from the interleaved 2c set
        (2, 12, 17, 17),
        (1, 3, 7, 4),  # sq > sk: the first rows are fully masked (uniform, zero gradient)
        (1, 1, 1, 8192),  # one decoding step over an 8192-key cache
        (1, 1, 3, 8192),
        (1, 2, 256, 256),  # full causal square above the parallel grain
    ],
)
def test_alibi_softmax_fp32_matches_reference(fused, b, heads, sq, sk):
    gen = torch.Generator().manual_seed(5)
    scores = torch.randn(b, heads, sq, sk, generator=gen) * 4
    slopes, scale = alibi_slopes(heads), 0.125
    _compare(lambda s: fused.alibi_softmax(s, slopes, scale), lambda s: alibi_softmax_reference(s, slopes, scale),
             (scores,), FP32)


def test_alibi_softmax_8192_causal_rows_sum_to_one(fused):
    # A long causal square is too slow through the reference on 2 cores; check its invariants
    # and a sample of rows against the reference on the sliced problem (same rows, same keys).
    sk, rows = 8192, torch.tensor([0, 1, 4095, 8191])
    scores = torch.randn(1, 1, 1, sk, generator=torch.Generator().manual_seed(6)).expand(1, 1, sk, sk)
    slopes = alibi_slopes(1)
    probs = fused.alibi_softmax(scores.contiguous(), slopes, 1.0)
    torch.testing.assert_close(probs[0, 0, rows].sum(-1), torch.ones(4), rtol=0, atol=1e-5)
    assert torch.all(probs[0, 0, 100, 101:] == 0) and torch.all(probs[0, 0, 100, :101] > 0)
    for i in rows.tolist():  # row i of an sk x sk square == the last row of an (i+1)-key problem
        one = scores[:, :, :1, : i + 1].contiguous()
        torch.testing.assert_close(probs[:, :, i : i + 1, : i + 1], alibi_softmax_reference(one, slopes, 1.0), **FP32)


def test_alibi_softmax_bf16_matches_reference(fused):
    gen = torch.Generator().manual_seed(7)
    scores = (torch.randn(2, 6, 24, 40, generator=gen) * 8).bfloat16()
    slopes = alibi_slopes(6)
    _compare(lambda s: fused.alibi_softmax(s, slopes, 0.25), lambda s: alibi_softmax_reference(s, slopes, 0.25),
             (scores,), BF16)
    _compare(lambda s: fused.alibi_softmax(s, slopes, 0.25), lambda s: alibi_softmax_reference(s, slopes, 0.25),
             (scores,), BF16, ref_dtype=torch.float64)


def test_alibi_softmax_bias_is_added_inside(fused):
    # Zero scores: the probabilities are softmax(slope * j) alone, an independent closed form.
    slopes = torch.tensor([0.5, 0.0])
    probs = fused.alibi_softmax(torch.zeros(1, 2, 1, 4), slopes, 3.0)
    expected = torch.stack([torch.softmax(0.5 * torch.arange(4.0), 0), torch.full((4,), 0.25)])
    torch.testing.assert_close(probs[0, :, 0], expected, **FP32)


# ---------------------------------------------------------------- fp64 gradcheck


def test_gradcheck_fp64(ext, isa):
    gen = torch.Generator().manual_seed(8)

    def d(*shape):
        return torch.randn(*shape, generator=gen, dtype=torch.float64, requires_grad=True)

    assert torch.autograd.gradcheck(lambda x, w, b: FusedLayerNormFunction.apply(x, w, b, 1e-5, ext),
                                    (d(3, 2, 7), d(7), d(7)))
    assert torch.autograd.gradcheck(lambda x, b: FusedBiasGeLUFunction.apply(x, b, ext), (d(4, 9), d(9)))
    slopes = alibi_slopes(3).double()
    assert torch.autograd.gradcheck(lambda s: FusedAlibiSoftmaxFunction.apply(s, slopes, 0.7, ext),
                                    (d(2, 3, 4, 6),))


# ---------------------------------------------------------------- dispatch and fallback


@pytest.fixture
def rearmed_log():
    fallback.log_fallback.cache_clear()
    yield
    fallback.log_fallback.cache_clear()


def test_padding_mask_falls_back_with_one_log_line(fused, rearmed_log, caplog):
    scores, slopes = torch.randn(1, 2, 3, 3), alibi_slopes(2)
    mask = torch.zeros(1, 1, 3, 3, dtype=torch.bool)
    mask[..., 0] = True
    with caplog.at_level(logging.INFO, logger="bloomtrain.kernels"):
        for _ in range(3):
            out = fused.alibi_softmax(scores, slopes, 1.0, mask)
    torch.testing.assert_close(out, alibi_softmax_reference(scores, slopes, 1.0, mask), rtol=0, atol=0)
    records = [r for r in caplog.records if "padding mask" in r.getMessage()]
    # A padding mask is generation's normal case: one INFO line, no warning (fused kernels are the default).
    assert [r.levelno for r in records] == [logging.INFO]


def test_unsupported_device_and_dtype_fall_back(fused, rearmed_log, caplog):
    x = torch.randn(2, 4, device="meta")
    with caplog.at_level(logging.WARNING, logger="bloomtrain.kernels"):
        y = fused.layer_norm(x, torch.ones(4, device="meta"), torch.zeros(4, device="meta"), 1e-5)
        fused.layer_norm(x, torch.ones(4, device="meta"), torch.zeros(4, device="meta"), 1e-5)
        z = fused.bias_gelu(torch.ones(2, 3, dtype=torch.complex64), torch.zeros(3, dtype=torch.complex64))
    assert y.device.type == "meta" and y.shape == (2, 4)
    torch.testing.assert_close(z, bias_gelu_reference(torch.ones(2, 3, dtype=torch.complex64),
                                                      torch.zeros(3, dtype=torch.complex64)))
    messages = [r.getMessage() for r in caplog.records]
    assert sum("'meta'" in m for m in messages) == 1
    assert sum("complex64" in m for m in messages) == 1


def test_build_key_tracks_sources_and_cuda(monkeypatch, tmp_path):
    key = build.build_key(False)
    assert key == build.build_key(False) and key != build.build_key(True)
    src = tmp_path / "kernels"
    src.mkdir()
    for name in build.CPU_SOURCES + build.HEADERS:
        if (build.source_dir() / name).exists():
            (src / name).write_bytes((build.source_dir() / name).read_bytes())
    monkeypatch.setattr(build, "source_dir", lambda: src)
    assert build.build_key(False) == key
    (src / "bias_gelu_cpu.cpp").write_text("// changed\n", encoding="utf-8")
    assert build.build_key(False) != key


@pytest.mark.integration
def test_two_python_environments_get_two_kernel_builds(tmp_path):
    """A second venv that imports this very torch (a .pth onto our site-packages) gets its own build key, so
    neither rebuilds over the other's kernels; the key is stable between processes of one environment."""
    venv.create(tmp_path / "other", with_pip=False)
    other = tmp_path / "other" / "bin" / "python"
    purelib = subprocess.run([other, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # addsitedir also runs the .pth files there (our editable install)
    adds = "; ".join(f"site.addsitedir({d!r})" for d in site.getsitepackages())
    Path(purelib, "bloomstack_test.pth").write_text(f"import site; {adds}\n", encoding="utf-8")
    code = "import torch; from bloomtrain.kernels import build; print(torch.__file__, build.build_key(False))"

    def key(python) -> tuple[str, str]:
        out = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True).stdout
        torch_file, key = out.split()[-2:]
        return torch_file, key

    ours, theirs = key(sys.executable), key(other)
    assert ours[0] == theirs[0]  # the same torch build...
    assert ours[1] != theirs[1]  # ...in another environment: another key
    assert key(sys.executable) == ours and ours[1] == build.build_key(False)


def test_the_build_runs_our_ninja_whatever_comes_first_on_path(monkeypatch, tmp_path):
    """Debian's ninja 1.11 and pip's 1.13 record a build log's hashes differently, so each rebuilt the extension
    (~40 s) when the other had built last: the build runs the pip package's ninja, and leaves PATH as it was."""
    import shutil

    import ninja
    from torch.utils import cpp_extension

    system = tmp_path / "system-bin"
    system.mkdir()
    (system / "ninja").write_text("#!/bin/sh\nexit 1\n")
    (system / "ninja").chmod(0o755)
    path = f"{system}{os.pathsep}{os.environ['PATH']}"
    monkeypatch.setenv("PATH", path)
    monkeypatch.setenv("BLOOMSTACK_KERNEL_CACHE", str(tmp_path / "cache"))
    found = []

    def fake_load(**kwargs):
        found.append(shutil.which("ninja"))
        return "module"

    monkeypatch.setattr(cpp_extension, "load", fake_load)
    assert shutil.which("ninja") == str(system / "ninja")
    assert build.load(False) == "module"
    assert found == [os.path.join(ninja.BIN_DIR, "ninja")]
    assert os.environ["PATH"] == path


def test_build_kernels_cli_uses_the_cache(ext, capsys):
    from bloomtrain.cli.build_kernels import main

    assert main(["--cpu-only"]) == 0
    assert str(build.cache_root() / build.build_key(False)) in capsys.readouterr().out


def test_apex_without_apex_uses_fused(rearmed_log):
    pytest.importorskip("torch")
    try:
        import apex  # noqa: F401
    except ImportError:
        from bloomtrain.kernels import dispatch

        dispatch._apex_kernels.cache_clear()
        assert get_kernels("apex").name == "apex->fused"
    else:
        pytest.skip("apex is installed: the apex set is exercised by the GPU tests")


def test_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="kernels must be one of"):
        get_kernels("triton")


# ---------------------------------------------------------------- block-causal attention


def _qkv(b, heads, s, dtype, seed=11):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(b, heads, s, 8, generator=gen, dtype=torch.float64).to(dtype).requires_grad_(True)
            for _ in range(3)]


@pytest.mark.parametrize("s", [1, 5, 127, 128, 129, 300, 2100])  # 2100 > MAX_BLOCKS * BLOCK_ROWS rows
def test_block_causal_attention_equals_the_full_square(fused, s):
    # Same fused softmax on both sides, fp64: only the matmuls' summation order differs.
    slopes = alibi_slopes(3).double()
    q, k, v = _qkv(1 if s > 1000 else 2, 3, s, torch.float64)
    out = fused.attention(q, k, v, slopes, 0.3)
    assert "BlockCausalAttention" in out.grad_fn.name()
    ref = attention_reference(q, k, v, slopes, 0.3, softmax=fused_alibi_softmax)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_block_causal_attention_fp32_matches_the_torch_reference(fused):
    slopes = alibi_slopes(6)
    q, k, v = _qkv(2, 6, 300, torch.float32)
    out = fused.attention(q, k, v, slopes, 0.35)
    ref = get_kernels("torch").attention(q, k, v, slopes, 0.35)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    for a, b in zip(torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_block_bounds_cover_the_rows_in_bounded_blocks():
    for s in (1, 127, 128, 129, 1000, 2048, 8192, 8193):
        bounds = block_bounds(s)
        assert bounds[0][0] == 0 and bounds[-1][1] == s
        assert all(lo < hi and hi == nxt for (lo, hi), (nxt, _) in zip(bounds, bounds[1:]))
        assert len(bounds) <= MAX_BLOCKS and max(hi - lo for lo, hi in bounds) <= max(BLOCK_ROWS, -(-s // MAX_BLOCKS))


def test_attention_outside_the_block_path_runs_the_full_square(fused, rearmed_log, caplog):
    # Padding mask, attention dropout and a KV-cache step each run the composition, with one log line each.
    slopes = alibi_slopes(2).double()
    q, k, v = _qkv(1, 2, 6, torch.float64)
    mask = torch.zeros(1, 1, 6, 6, dtype=torch.bool)
    mask[..., 0] = True
    with caplog.at_level(logging.INFO, logger="bloomtrain.kernels"):
        for _ in range(2):
            masked = fused.attention(q, k, v, slopes, 0.5, mask)
            torch.manual_seed(0)
            dropped = fused.attention(q, k, v, slopes, 0.5, None, 0.5)
            step = fused.attention(q[:, :, -1:], k, v, slopes, 0.5)
    assert not any("BlockCausal" in t.grad_fn.name() for t in (masked, dropped, step))
    torch.testing.assert_close(masked, attention_reference(q, k, v, slopes, 0.5, mask, softmax=alibi_softmax_reference),
                               rtol=1e-6, atol=1e-6)
    torch.manual_seed(0)
    torch.testing.assert_close(dropped, attention_reference(q, k, v, slopes, 0.5, None, 0.5,
                                                            softmax=fused_alibi_softmax))
    torch.testing.assert_close(step, fused.attention(q, k, v, slopes, 0.5)[:, :, -1:], rtol=1e-12, atol=1e-12)
    records = [r for r in caplog.records if "block-causal" in r.getMessage()]
    assert len(records) == 3 and len({r.getMessage() for r in records}) == 3
    # Generation's cases (padding mask, KV-cache step) log at INFO; attention dropout in training warns.
    levels = {case: r.levelno for r in records for case in ("padding mask", "KV-cache", "dropout")
              if case in r.getMessage()}
    assert levels == {"padding mask": logging.INFO, "KV-cache": logging.INFO, "dropout": logging.WARNING}, levels


def test_model_on_fused_kernels_matches_the_torch_kernels(fused):
    # Whole model, 300 tokens (three attention blocks), 6 heads: logits, loss and every gradient.
    from bloomtrain.model.bloom import BloomModel  # noqa: PLC0415
    from bloomtrain.model.config import ModelConfig  # noqa: PLC0415

    ids = torch.randint(0, 250, (2, 301), generator=torch.Generator().manual_seed(5))
    results = {}
    for kind in ("torch", "fused"):
        model = BloomModel(ModelConfig.tiny(num_heads=6, hidden_size=96, kernels=kind, seq_length=300)).train()
        logits = model(ids[:, :-1])
        loss = model.loss(logits, ids[:, 1:])
        loss.backward()
        results[kind] = (logits, loss, {n: p.grad for n, p in model.named_parameters()})
    (lt, losst, gt), (lf, lossf, gf) = results["torch"], results["fused"]
    torch.testing.assert_close(lf, lt, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(lossf, losst, rtol=1e-6, atol=0)
    for name in gt:
        torch.testing.assert_close(gf[name], gt[name], rtol=1e-4, atol=1e-6, msg=name)
