"""The fused kernels' first-use self-check: "auto" uses what passes, falls back per kernel, "fused" errors.

Wrong kernels are injected by replacing an entry point of the real extension module (monkeypatch, undone after the
test), so the check and the model call the same broken function; a failed build is simulated with a missing source
file in a fresh cache directory, as a user without the file (or the compiler) would see it.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
import torch
import yaml

from bloomdata.errors import BloomstackError
from bloomtrain.kernels import build, fallback, selfcheck, selfcheck_report
from bloomtrain.model.bloom import BloomModel
from bloomtrain.model.config import ModelConfig

ROOT = Path(__file__).resolve().parents[2]
FUSED_NODES = {"FusedLayerNormFunctionBackward", "FusedBiasGeLUFunctionBackward",
               "BlockCausalAttentionFunctionBackward"}
# Logits of the same weights on fused vs PyTorch kernels (|logit| < 0.6 here). fp32: the kernels are within 1e-6
# of the references (tests/bloomtrain/test_kernels.py); 2 layers keep the logits within 1e-5 (1.5e-7 measured).
# bf16: both models round every activation to bf16, at different points; the logits may differ by one bf16 ulp at
# their largest value, 2**-8 = 3.9e-3 (4.9e-4 measured).
MODEL_TOL = {torch.float32: {"rtol": 1e-5, "atol": 1e-5}, torch.bfloat16: {"rtol": 1.6e-2, "atol": 4e-3}}


@pytest.fixture(scope="module")
def ext():
    module, reason = build.try_load(False)
    assert module is not None, f"CPU kernel build failed: {reason}"
    return module


@pytest.fixture
def fresh(ext):
    """Forget earlier checks and log lines, before and after the test (the injected kernels must not leak)."""
    selfcheck.reset()
    fallback.log_fallback.cache_clear()
    yield
    selfcheck.reset()
    fallback.log_fallback.cache_clear()


def _graph(t: torch.Tensor) -> set[str]:
    """Names of every autograd node behind ``t``: which kernels the forward actually ran."""
    names, seen, stack = set(), set(), [t.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(fn.name())
        stack.extend(f for f, _ in fn.next_functions)
    return names


def _logits(kernels: str, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    # Same config and init seed: the two models hold the same weights (the init is seeded per parameter name).
    config = ModelConfig.tiny(num_heads=4, seq_length=136, kernels=kernels)
    ids = torch.randint(0, config.vocab_size, (2, 136), generator=torch.Generator().manual_seed(3))
    return BloomModel(config, dtype=dtype)(ids)


def _report(device: str = "cpu", dtype: str = "float32") -> dict[str, dict]:
    return {r["kernel"]: r for r in selfcheck_report() if r["device"] == device and r["dtype"] == dtype}


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "bloomtrain.kernels" and r.levelno >= logging.WARNING]


def _perturbed(fn, factor: float = 1.05):
    return lambda *args: fn(*args) * factor


# ---------------------------------------------------------------- pass


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_auto_selects_the_fused_kernels_and_matches_the_torch_model(fresh, caplog, dtype):
    name = str(dtype).removeprefix("torch.")
    with caplog.at_level(logging.INFO, logger="bloomtrain.kernels"):
        fused = _logits("auto", dtype)
    report = _report(dtype=name)
    assert sorted(report) == sorted(selfcheck.KERNELS)
    for r in report.values():
        assert r["fused"] and r["reason"] is None and r["failure"] is None, r
        assert 0 <= r["tolerance_used"] <= 1 and r["max_error"] < 2 * r["rtol"], r
    assert FUSED_NODES <= _graph(fused)  # the forward ran the fused kernels, not just the check
    assert not _warnings(caplog)
    assert sum(f"self-check on cpu {name}" in r.getMessage() for r in caplog.records) == 1
    reference = _logits("torch", dtype)
    assert not FUSED_NODES & _graph(reference)
    torch.testing.assert_close(fused.float(), reference.float(), **MODEL_TOL[dtype])


def test_report_is_json_and_only_checked_kinds_check(fresh):
    _logits("torch")
    assert selfcheck_report() == []  # kernels=torch never builds nor checks
    _logits("auto")
    _logits("auto")  # checked once per device type and dtype
    records = json.loads(json.dumps(selfcheck_report()))
    assert [(r["kernel"], r["device"], r["dtype"], r["fused"]) for r in records] == [
        (k, "cpu", "float32", True) for k in selfcheck.KERNELS]
    assert all(r["device_name"].startswith("cpu (") and r["rtol"] == r["atol"] == 1e-5 for r in records)


def test_check_runs_under_inference_mode_and_leaves_the_rng_alone(fresh):
    rng = torch.get_rng_state()
    threads = torch.get_num_threads()
    with torch.inference_mode():
        config = ModelConfig.tiny(kernels="auto")
        model = BloomModel(config)
        rng = torch.get_rng_state()  # after the init, which draws from the global stream
        model(torch.zeros(1, 8, dtype=torch.long))
    assert torch.equal(torch.get_rng_state(), rng)
    assert torch.get_num_threads() == threads
    assert all(r["fused"] for r in _report().values()) and len(_report()) == 4


def test_check_is_cheap_once_the_extension_is_loaded(fresh):
    started = time.perf_counter()
    selfcheck.check(torch.device("cpu"), torch.bfloat16)
    elapsed = time.perf_counter() - started
    # About 10 ms on one idle core; a second allows for a loaded shared machine.
    assert elapsed < 1.0, f"self-check took {elapsed * 1e3:.0f} ms"
    assert sum(r["ms"] for r in _report(dtype="bfloat16").values()) <= elapsed * 1e3


# ---------------------------------------------------------------- a wrong kernel


def test_auto_falls_back_for_a_wrong_kernel_only(fresh, ext, monkeypatch, caplog):
    monkeypatch.setattr(ext, "bias_gelu_fwd", _perturbed(ext.bias_gelu_fwd))
    with caplog.at_level(logging.WARNING, logger="bloomtrain.kernels"):
        logits = _logits("auto")
        _logits("auto")
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "fused bias_gelu disabled on cpu float32" in warnings[0] and "output differs" in warnings[0]
    report = _report()
    assert not report["bias_gelu"]["fused"] and report["bias_gelu"]["failure"] == "mismatch"
    assert report["bias_gelu"]["max_error"] == pytest.approx(0.05, rel=0.01)  # the injected 5%
    assert all(report[k]["fused"] for k in ("layer_norm", "alibi_softmax", "attention"))
    nodes = _graph(logits)
    assert "FusedBiasGeLUFunctionBackward" not in nodes
    assert {"FusedLayerNormFunctionBackward", "BlockCausalAttentionFunctionBackward"} <= nodes
    torch.testing.assert_close(logits, _logits("torch"), **MODEL_TOL[torch.float32])


def test_a_wrong_backward_is_caught(fresh, ext, monkeypatch, caplog):
    # The forward is right; dx of LayerNorm is 5% off: only the gradient comparison can see it.
    real = ext.layer_norm_bwd

    def wrong_backward(*args):
        dx, dweight, dbias = real(*args)
        return dx * 1.05, dweight, dbias

    monkeypatch.setattr(ext, "layer_norm_bwd", wrong_backward)
    with caplog.at_level(logging.WARNING, logger="bloomtrain.kernels"):
        _logits("auto")
    report = _report()
    assert report["layer_norm"]["failure"] == "mismatch" and "dx differs" in report["layer_norm"]["reason"]
    assert [k for k, r in report.items() if not r["fused"]] == ["layer_norm"]
    assert len(_warnings(caplog)) == 1


def test_a_kernel_that_raises_falls_back_with_one_line(fresh, ext, monkeypatch, caplog):
    def boom(*args):
        raise RuntimeError("illegal instruction in alibi_softmax_fwd")

    monkeypatch.setattr(ext, "alibi_softmax_fwd", boom)
    with caplog.at_level(logging.WARNING, logger="bloomtrain.kernels"):
        logits = _logits("auto")
    # The block-causal attention calls the same softmax kernel, so both fail, for the same reason: one line.
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "fused alibi_softmax, attention disabled" in warnings[0]
    assert "raised RuntimeError: illegal instruction" in warnings[0]
    assert [k for k, r in _report().items() if not r["fused"]] == ["alibi_softmax", "attention"]
    torch.testing.assert_close(logits, _logits("torch"), **MODEL_TOL[torch.float32])


def test_fused_with_a_failing_check_is_an_error(fresh, ext, monkeypatch):
    monkeypatch.setattr(ext, "bias_gelu_fwd", _perturbed(ext.bias_gelu_fwd))
    with pytest.raises(BloomstackError) as err:
        _logits("fused")
    message = str(err.value)
    assert "\n" not in message
    assert "model.kernels=fused: the fused bias_gelu kernel failed its self-check on cpu float32" in message
    assert "output differs" in message and "set model.kernels=auto" in message and "model.kernels=torch" in message


# ---------------------------------------------------------------- a failed build


@pytest.fixture
def broken_build(fresh, monkeypatch, tmp_path):
    """The extension cannot build: a source file is missing (a fresh cache, so no earlier build is found)."""
    monkeypatch.setenv("BLOOMSTACK_KERNEL_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "CPU_SOURCES", build.CPU_SOURCES + ("does_not_exist.cpp",))
    build.try_load.cache_clear()
    yield
    build.try_load.cache_clear()  # the next test loads the real extension again


def test_auto_without_the_extension_falls_back_with_one_warning(broken_build, caplog):
    with caplog.at_level(logging.WARNING, logger="bloomtrain.kernels"):
        logits = _logits("auto")
        _logits("auto")
    warnings = _warnings(caplog)
    assert len(warnings) == 1, warnings
    assert "fused layer_norm, bias_gelu, alibi_softmax, attention disabled on cpu float32" in warnings[0]
    assert "does_not_exist.cpp" in warnings[0]
    assert build.try_load.cache_info().misses == 1  # the failed build is not retried
    assert all(r["failure"] == "build" and not r["fused"] for r in _report().values())
    assert not FUSED_NODES & _graph(logits)
    torch.testing.assert_close(logits, _logits("torch"), rtol=0, atol=0)  # the PyTorch path, exactly


def test_fused_without_the_extension_is_an_error(broken_build):
    with pytest.raises(BloomstackError, match=r"fused layer_norm kernel is unavailable on cpu float32: the extension "
                                              r"did not build: .*does_not_exist\.cpp.*bloomtrain build-kernels "
                                              r"--verbose.*model\.kernels=auto"):
        _logits("fused")


# ---------------------------------------------------------------- defaults


def test_auto_is_the_default_and_every_recipe_sets_it():
    assert ModelConfig.tiny().kernels == "auto"
    recipes = sorted((ROOT / "configs" / "train").glob("*.yaml"))
    assert recipes
    for path in recipes:
        model = yaml.safe_load(path.read_text(encoding="utf-8"))["model"]
        assert model.get("kernels") == "auto", f"{path.name}: model.kernels is {model.get('kernels')!r}"


@pytest.mark.integration
def test_checkpoint_metadata_records_the_selfcheck(tmp_path):
    """A run on kernels=auto saves the self-check it ran in bloomtrain_model.json (which kernels ran fused)."""
    import json

    from tests.bloomtrain.train_helpers import EXACT, train_rank
    from tests.harness.gloo_harness import run_distributed

    ckpt = tmp_path / "ckpt"
    out = run_distributed(train_rank, 1, [*EXACT, "schedule.train_iters=1", "model.kernels=auto",
                                          f"checkpoint.dir={ckpt}"], timeout_s=300)[0]
    assert out["error"] is None, out["error"]
    meta = json.loads((ckpt / "global_step1" / "bloomtrain_model.json").read_text())
    assert meta["model"]["kernels"] == "auto"
    checks = {c["kernel"]: c for c in meta["kernel_selfcheck"] if c["dtype"] == "float32"}
    assert set(checks) == {"layer_norm", "bias_gelu", "alibi_softmax", "attention"}, meta["kernel_selfcheck"]
    assert all(c["fused"] and c["device"] == "cpu" for c in checks.values())
