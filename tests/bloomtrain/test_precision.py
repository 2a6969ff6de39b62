"""The precision that fits the hardware (bloomtrain.precision): bf16 on a GPU and on a CPU with native bf16 units,
fp32 on a CPU without them unless ``optim.force_bf16``; the trainer takes that decision once and records it.

The CPU is an input (``CpuInfo``), so the AVX2-only case is tested on any machine, this one included.
"""

from __future__ import annotations

import json

import pytest

from bloomdata.config_loader import derive
from bloomtrain.config import load_config
from bloomtrain.metrics import START_EVENT, read_precision
from bloomtrain.precision import CpuInfo, fit_precision
from tests.bloomtrain.train_helpers import EXACT, TINY
from tests.harness.gloo_harness import run_distributed

# /proc/cpuinfo excerpts (first processor block, flags cut to the ones that matter and a few others)
ZEN2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse2 avx fma avx2\n"
SKYLAKE = "model name\t: Intel(R) Xeon(R) Gold 6148\nflags\t\t: avx avx2 avx512f avx512bw avx512vl\n"
SAPPHIRE = "model name\t: Intel(R) Xeon(R) Platinum 8480+\nflags\t\t: avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
GRAVITON3 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 i8mm\nCPU implementer\t: 0x41\n"
AVX2 = CpuInfo(model="AMD EPYC 7B12", flags=frozenset({"avx", "avx2", "fma"}), capability="AVX2")


def _cpu(tmp_path, text: str) -> CpuInfo:
    path = tmp_path / "cpuinfo"
    path.write_text(text + "\nprocessor\t: 1\nmodel name\t: other\nflags\t\t: avx512_bf16\n")
    return CpuInfo.detect(path)


@pytest.mark.parametrize(("text", "native"), [(ZEN2, []), (SKYLAKE, []), (SAPPHIRE, ["avx512_bf16", "amx_bf16"]),
                                              (GRAVITON3, ["bf16"])], ids=["zen2", "skylake", "sapphire", "graviton3"])
def test_native_bf16_is_read_from_the_first_processors_flags(tmp_path, text, native):
    assert _cpu(tmp_path, text).native_bf16 == native


def test_a_bf16_config_trains_fp32_on_a_cpu_without_native_bf16(tmp_path):
    cfg = load_config(TINY, ["optim.precision=bf16"])
    choice = fit_precision(cfg, "cpu", _cpu(tmp_path, ZEN2))
    assert (choice.configured, choice.ran, choice.changed) == ("bf16", "fp32", True)
    assert choice.line().startswith("precision: bf16 -> fp32, this CPU (AMD EPYC 7B12; torch CPU kernels: ")
    assert "no native bf16" in choice.line() and "optim.force_bf16=true" in choice.line()
    ran = choice.apply(cfg)
    assert ran.optim.precision == "fp32" and derive(ran, optim=cfg.optim) == cfg
    assert "bf16" not in ran.to_deepspeed_config(1)


@pytest.mark.parametrize(("device", "text", "overrides"), [
    ("cuda", ZEN2, []),  # a GPU run gets what the config says, whatever its host CPU
    ("cpu", SAPPHIRE, []),  # native bf16 units
    ("cpu", ZEN2, ["optim.force_bf16=true"]),  # the tests of bf16 numerics
])
def test_bf16_is_kept_on_a_gpu_on_native_bf16_and_when_forced(tmp_path, device, text, overrides):
    cfg = load_config(TINY, ["optim.precision=bf16", *overrides])
    choice = fit_precision(cfg, device, _cpu(tmp_path, text))
    assert (choice.ran, choice.changed) == ("bf16", False)
    assert choice.apply(cfg) is cfg
    assert choice.line().startswith("precision: bf16 (")


def test_an_fp32_config_stays_fp32(tmp_path):
    cfg = load_config(TINY, ["optim.precision=fp32"])
    assert fit_precision(cfg, "cpu", _cpu(tmp_path, SAPPHIRE)).line() == "precision: fp32 (as configured)"


def _fallback_rank(log_dir: str) -> dict:
    from bloomtrain.kernels import selfcheck, selfcheck_report
    from bloomtrain.train import build_trainer

    selfcheck.reset()  # forked from pytest: forget the checks an earlier test ran in this process
    cfg = load_config(TINY, [*EXACT, "optim.precision=bf16", "schedule.train_iters=2", f"logging.dir={log_dir}",
                             "logging.tensorboard=false"])
    trainer = build_trainer(cfg, cpu=AVX2)
    result = trainer.fit()
    params = {p.dtype for p in trainer.module.engine.module.parameters()}
    return {"optimizer": type(trainer.module.engine.optimizer).__name__, "dtypes": {str(d) for d in params},
            "precision": trainer.cfg.optim.precision, "losses": result.losses,
            "selfcheck": {c["dtype"] for c in selfcheck_report()}}


@pytest.mark.integration
def test_the_trainer_runs_the_fitted_precision_and_records_it(tmp_path):
    r = run_distributed(_fallback_rank, 1, str(tmp_path), timeout_s=300)[0]
    # fp32 all the way down: our clipped AdamW (not DeepSpeed's BF16_Optimizer), fp32 weights, fp32 kernel checks
    assert (r["optimizer"], r["dtypes"], r["precision"]) == ("ClippedAdamW", {"torch.float32"}, "fp32")
    assert r["selfcheck"] == {"float32"} and len(r["losses"]) == 2
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["event"] == START_EVENT and lines[0]["precision"]["ran"] == "fp32"  # in the launch's header
    record = read_precision(tmp_path / "metrics.jsonl")
    assert record is not None and (record.configured, record.ran) == ("bf16", "fp32")
    assert record.device == "cpu (AMD EPYC 7B12; torch CPU kernels: AVX2)"
