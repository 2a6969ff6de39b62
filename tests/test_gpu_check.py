"""``make gpu-check`` (benchmarks/gpu_check.py) as far as a CPU machine can check it: the one-line refusal, every
command it would run on a GPU parsed by its script's own argument parser, the report's JSON schema and Markdown,
the pass/fail rules, and the MFU bench's figures against the trainer's formula on a tiny CPU run.

What needs a GPU (the kernels' CUDA build, ``pytest -m gpu``, the figures themselves) runs in ``make gpu-check``
on a CUDA machine; its report goes to benchmarks/RESULTS.md with the device named.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_check
from benchmarks.gpu_check import CheckResult, DeviceInfo, GpuReport

ROOT = Path(__file__).resolve().parents[1]
DEVICE = DeviceInfo(gpu="NVIDIA H100 80GB HBM3", gpu_count=1, compute_capability="9.0", memory_gib=79.1,
                    driver="570.124.06", cuda_runtime="12.8", nvcc="Build cuda_12.8.r12.8/compiler.35404655_0",
                    torch="2.13.0+cu128", cudnn="91000", deepspeed="0.19.8", python="3.11.7", host="gpu-1")
MFU = {"preset": "bloom-560m", "shape": {"layers": 24, "hidden": 1024, "heads": 16, "seq": 2048,
                                         "vocab_padded": 250880},
       "layout": {"tp": 1, "pp": 1, "recipe_tp": 1, "recipe_pp": 1}, "dropout": {"hidden": 0.1, "attention": 0.1},
       "activation_checkpointing": True, "micro_batch": 4, "global_batch": 16, "step_time_s": 0.5,
       "tokens_per_s": 65536.0, "hw_tflops": 120.0, "hfu": 0.121, "model_tflops": 90.0, "mfu": 0.091,
       "memory_gib": 30.25,
       "anchor": {"step_time_s": 0.4, "tokens_per_s": 81920.0, "memory_gib": 39.0, "mfu": 0.114, "model_tflops": 112.5,
                  "timed_iterations": 8, "compiled_blocks": True, "precision": "bf16",
                  "profile": {"rank": 0, "iterations": [12, 13], "device": "cuda", "wall_ms": 800.0, "total_ms": 760.0,
                              "busy": 0.95, "groups": {"matmul": 450.0, "attention": 150.0, "copy": 10.0}, "top": []}},
       "ratio_vs_anchor": 0.8,
       "profile": {"rank": 0, "iterations": [12, 13], "device": "cuda", "wall_ms": 1000.0, "total_ms": 800.0,
                   "busy": 0.8,
                   "groups": {"matmul": 500.0, "attention": 300.0},
                   "top": [{"name": "attention_bwd_dkdv_kernel", "ms": 200.0, "calls": 192, "share": 0.25}]}}


@pytest.mark.integration
def test_without_cuda_it_says_so_in_one_line_and_exits_2(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--out", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith("gpu-check: no CUDA GPU here (torch ")
    assert not (tmp_path / "r").exists()


def _script_parser(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.parser()


@pytest.mark.parametrize("quick", [False, True], ids=["full", "quick"])
def test_every_planned_command_parses_with_its_scripts_own_parser(quick):
    checks = gpu_check.plan(quick, python="PY")
    assert [c.name for c in checks] == ["build-kernels", "kernel-selfcheck", "pytest-gpu", "bench_kernels",
                                        "bench_model", "bench_head_loss", "bench_train", "bench_eval",
                                        "mfu-bloom-560m", "mfu-bloom-1b7"]
    for check in checks:
        assert check.args[0] == "PY"
        script = Path(check.args[1])
        if script.suffix != ".py":  # python -m bloomtrain.cli / pytest
            continue
        assert script.is_file(), script
        args = (_script_parser(script.stem) if script.stem != "gpu_check" else None), check.args[2:]
        if args[0] is not None:
            parsed = args[0].parse_args(args[1])
            assert getattr(parsed, "device", "cuda") == "cuda", check.name  # the GPU rows
        if check.json_out:
            assert check.json_out in check.args, check.name  # the figures land where the report reads them
    mfu = [c for c in checks if c.name.startswith("mfu-")]
    assert [c.args[c.args.index("--preset") + 1] for c in mfu] == ["bloom-560m", "bloom-1b7"]
    assert all((ROOT / "configs" / "train" / f"{c.name[4:]}.yaml").is_file() for c in mfu)
    for c in mfu:  # the anchor in the same run; the recipe's own recompute (no override)
        parsed = _script_parser("bench_mfu").parse_args(c.args[2:])
        assert parsed.anchor and parsed.activation_checkpointing is None, c.name
    [pytest_gpu] = [c for c in checks if c.name == "pytest-gpu"]
    files = [a for a in pytest_gpu.args if a.endswith(".py")]
    assert files == [str(f) for f in gpu_check.gpu_test_files()]
    assert "tests" not in [Path(a).name for a in pytest_gpu.args]


def test_the_gpu_test_files_are_those_holding_a_gpu_marked_test(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "test_a.py").write_text("import pytest\n\n@pytest.mark.gpu\ndef test_x():\n    pass\n")
    (tmp_path / "sub" / "test_b.py").write_text("import pytest\n\npytestmark = [pytest.mark.gpu]\n")
    (tmp_path / "test_c.py").write_text("# a comment on @pytest.mark.gpu tests elsewhere\nGPU = 'gpu'\n")
    (tmp_path / "helpers.py").write_text("import pytest\n\n@pytest.mark.gpu\ndef test_y():\n    pass\n")
    assert gpu_check.gpu_test_files(tmp_path) == [tmp_path / "sub" / "test_b.py", tmp_path / "test_a.py"]
    found = {p.relative_to(ROOT).as_posix() for p in gpu_check.gpu_test_files()}
    assert {"tests/bloomtrain/test_kernels_cuda.py", "tests/bloomtrain/test_checkpoint.py",
            "tests/bloomtrain/test_head_loss.py"} <= found


# Collection as on a GPU machine with only `pip install .[train] pytest`: a meta-path hook makes every installed
# distribution outside that closure unimportable (Prefect, megatron-core, datatrove, lm-eval, ...).
_TRAIN_ONLY = '''
import sys
from importlib import metadata
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

def closure(roots):
    seen, todo = set(), list(roots)
    while todo:
        name, extras = todo.pop()
        key = (canonicalize_name(name), frozenset(extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
                todo.append((req.name, tuple(req.extras)))
    return {name for name, _ in seen}

allowed = closure([("bloomstack", ("train",)), ("pytest", ())])
blocked = {top for top, dists in metadata.packages_distributions().items()
           if not any(canonicalize_name(d) in allowed for d in dists)} - {"tests", "benchmarks"}

from importlib.machinery import PathFinder

class TrainOnly(PathFinder):
    """sys.path's finder, blind to the blocked distributions: `import pandas` fails and
    importlib.util.find_spec("pandas") is None, as where it is not installed (torch probes such modules)."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            return None
        return PathFinder.find_spec(name, path, target)

sys.meta_path[:] = [TrainOnly if finder is PathFinder else finder for finder in sys.meta_path]
import pytest
sys.exit(pytest.main(sys.argv[1:]))
'''


@pytest.mark.integration
def test_the_gpu_tests_collect_with_only_the_train_extra_installed(tmp_path):
    files = [str(f) for f in gpu_check.gpu_test_files()]
    env = {**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    out = subprocess.run([sys.executable, "-c", _TRAIN_ONLY, "--collect-only", "-q", "-m", "gpu", "-p",
                          "no:cacheprovider", "--rootdir", str(ROOT), *files], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    collected = [line for line in out.stdout.splitlines() if "::" in line]
    assert "tests/bloomtrain/test_checkpoint.py::test_cli_trains_saves_and_resumes_on_gpu" in collected, out.stdout
    assert len(collected) >= 8 and not any("::test_sigterm_saves" in line for line in collected)  # -m gpu only
    # the hook bites: the whole suite's collection, which imports Prefect, megatron-core..., fails under it
    whole = subprocess.run([sys.executable, "-c", _TRAIN_ONLY, "--collect-only", "-q", "-p", "no:cacheprovider",
                            "--rootdir", str(ROOT), str(ROOT / "tests" / "flows")], capture_output=True, text=True,
                           timeout=600, cwd=tmp_path, env=env)
    assert whole.returncode != 0 and "No module named 'prefect'" in whole.stdout + whole.stderr


def _report(checks: list[CheckResult]) -> GpuReport:
    return GpuReport(created="2026-11-25T00:00:00+00:00", passed=all(c.passed for c in checks), quick=False,
                     device=DEVICE, checks=checks)


def test_the_report_round_trips_through_its_json_schema_and_reads_as_markdown(tmp_path):
    checks = [CheckResult(name="build-kernels", command="PY -m bloomtrain.cli build-kernels --cuda", passed=True,
                          seconds=61.0, returncode=0),
              CheckResult(name="pytest-gpu", command="PY -m pytest -m gpu", passed=False, seconds=30.0, returncode=1,
                          figures={"tests": 12, "failures": 1, "errors": 0, "skipped": 0, "skipped_tests": []},
                          detail="FAILED tests/bloomtrain/test_kernels_cuda.py::test_cuda_layer_norm",
                          log="logs/p.log"),
              CheckResult(name="mfu-bloom-560m", command="PY benchmarks/bench_mfu.py --preset bloom-560m",
                          passed=True, seconds=90.0, returncode=0, figures=MFU)]
    gpu_check.write_report(_report(checks), tmp_path)
    data = json.loads((tmp_path / "gpu_report.json").read_text())
    assert GpuReport.model_validate(data) == _report(checks)
    schema = GpuReport.model_json_schema()
    assert set(schema["required"]) == {"created", "passed", "quick", "device", "checks"}
    assert data["passed"] is False and data["schema_version"] == 1
    assert {"driver", "cuda_runtime", "torch", "nvcc"} <= set(data["device"])
    md = (tmp_path / "gpu_report.md").read_text()
    assert md.startswith("# gpu-check: FAILED on 1 x NVIDIA H100 80GB HBM3")
    assert "| 570.124.06 | 12.8 |" in md and "| pytest-gpu | **FAIL** | 30 | 12 tests, 1 failed" in md
    assert ("| bloom-560m | 24 x 1024, 2048 | 1 x 1 | 4 x 4 | 0.1/0.1 | on | 0.500 | 65,536 | 90.0 | 9.1% | 120.0 | "
            "12.1% | 30.2 | 81,920 | 11.4% | 39.0 | 0.80x |") in md
    assert "| mfu-bloom-560m | pass | 90 | 90.0 model TFLOP/s per GPU, MFU 9.1%, 0.80x the anchor |" in md
    assert "### pytest-gpu" in md and "test_cuda_layer_norm" in md
    # where the step's time goes: bench_mfu --profile's summary
    assert "| wall (the profiled steps) | 1000 | 800 |" in md and "| device busy | 80.0% | 95.0% |" in md
    assert "| matmul | 500.0 | 450.0 |" in md and "| attention | 300.0 | 150.0 |" in md
    assert "| copy | 0.0 | 10.0 |" in md
    assert "| `attention_bwd_dkdv_kernel` | 200.0 | 192 | 25.0% |" in md


def _junit(tmp_path: Path, body: str) -> None:
    (tmp_path / "figures").mkdir(exist_ok=True)
    (tmp_path / "figures" / "pytest_gpu.xml").write_text(f"<testsuites>{body}</testsuites>")


@pytest.mark.parametrize(("body", "returncode", "passed"), [
    ('<testsuite tests="3" failures="0" errors="0" skipped="0"><testcase classname="a" name="t"/></testsuite>', 0, True),  # noqa: E501
    ('<testsuite tests="0" failures="0" errors="0" skipped="0"></testsuite>', 0, False),  # nothing ran
    ('<testsuite tests="2" failures="0" errors="0" skipped="1"><testcase classname="a" name="t">'
     '<skipped message="needs CUDA"/></testcase></testsuite>', 0, False),  # a GPU test skipped on a GPU machine
    ('<testsuite tests="2" failures="1" errors="0" skipped="0"></testsuite>', 1, False),
], ids=["ran", "none", "skipped", "failed"])
def test_pytest_gpu_passes_only_when_tests_ran_and_none_failed_or_skipped(tmp_path, body, returncode, passed):
    _junit(tmp_path, body)
    result = CheckResult(name="pytest-gpu", command="c", passed=returncode == 0, seconds=1.0, returncode=returncode)
    judged = gpu_check.judge_pytest(result, tmp_path)
    assert judged.passed is passed
    if "skipped message" in body:
        assert judged.detail == "skipped: a::t: needs CUDA"


def test_a_check_that_writes_no_figures_fails_and_the_run_fails(tmp_path):
    ok = gpu_check.Check("fine", [sys.executable, "-c", "import json; json.dump({'ratio': 1.5}, open('f.json', 'w'))"],
                         60, "f.json")
    silent = gpu_check.Check("silent", [sys.executable, "-c", "print('no figures')"], 60, "g.json")
    crash = gpu_check.Check("crash", [sys.executable, "-c", "raise SystemExit('boom')"], 60)
    report = gpu_check.run_all([ok, silent, crash], tmp_path, DEVICE, quick=True)
    assert [c.passed for c in report.checks] == [True, False, False] and not report.passed
    assert report.checks[0].figures == {"ratio": 1.5}
    assert report.checks[1].detail == "exited 0 without writing g.json"
    assert report.checks[2].returncode == 1 and "boom" in report.checks[2].detail
    assert "| fine | pass |" in (tmp_path / "gpu_report.md").read_text()
    assert GpuReport.model_validate_json((tmp_path / "gpu_report.json").read_text()) == report


def _bench_mfu():
    spec = importlib.util.spec_from_file_location("_bench_mfu", ROOT / "benchmarks" / "bench_mfu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def _mfu_rank() -> dict:
    bench = _bench_mfu()
    return bench.measure(bench.parser().parse_args(["--quick", "--device", "cpu", "--precision", "fp32", "--iters",
                                                    "3", "--warmup", "1", "--activation-checkpointing"]))


@pytest.mark.integration
def test_the_mfu_bench_reports_the_trainers_figures_by_megatrons_formula():
    """bench_mfu's CPU path on a tiny shape (one forked gloo rank): the figures are the formula over the step time."""
    from bloomtrain.metrics import flops_per_iteration
    from bloomtrain.model.config import ModelConfig
    from tests.harness.gloo_harness import run_distributed

    f = json.loads(json.dumps(run_distributed(_mfu_rank, 1, timeout_s=300)[0]))  # what --json writes
    model = ModelConfig(num_layers=2, hidden_size=64, num_heads=4, seq_length=64, vocab_size=512, pad_vocab_size_to=512)
    assert f["flops_per_iteration"] == {"model": flops_per_iteration(model, 16, 1, False),
                                        "hardware": flops_per_iteration(model, 16, 1, True)}
    assert f["activation_checkpointing"] is True and f["timed_iterations"] == 3 and f["mfu"] is None
    assert f["precision"] == "fp32" and f["shape"]["vocab_padded"] == 512 and "anchor" not in f
    # with checkpointing the hardware count adds one more forward of each block: per token, at h = s = 64, l = 2,
    # V = 512, l (96 + 8) h^2 + 6 h V against l (72 + 6) h^2 + 6 h V
    hw_over_model = (2 * 104 * 64**2 + 6 * 64 * 512) / (2 * 78 * 64**2 + 6 * 64 * 512)
    assert f["hw_tflops"] == pytest.approx(f["model_tflops"] * hw_over_model, rel=1e-9)
    assert f["model_tflops"] == pytest.approx(f["flops_per_iteration"]["model"] / f["step_time_s"] / 1e12, rel=1e-9)


@pytest.mark.parametrize(("preset", "flags", "layout", "recompute"), [
    ("bloom-560m", [], (1, 1), False),  # the recipe: TP 1 x PP 1, no recompute
    ("bloom-1b7", [], (1, 1), True),  # the recipe's TP 2 x PP 2 does not fit one process; its recompute stays
    ("bloom-1b7", ["--no-activation-checkpointing"], (1, 1), False),
    ("bloom-560m", ["--activation-checkpointing"], (1, 1), True),
])
def test_the_mfu_bench_runs_the_recipe_as_it_is_fitted_to_one_process(tmp_path, preset, flags, layout, recompute):
    bench = _bench_mfu()
    cfg, recipe_layout = bench.load_recipe(bench.parser().parse_args(["--preset", preset, *flags]), str(tmp_path))
    assert (cfg.parallel.tp, cfg.parallel.pp) == layout and cfg.parallel.activation_checkpointing is recompute
    assert recipe_layout == ((2, 2) if preset == "bloom-1b7" else (1, 1))
    assert cfg.model.hidden_dropout == cfg.model.attention_dropout == 0.1  # the recipe's dropout, untouched
    assert cfg.dp_size(1) == 1  # one GPU takes it
    assert bench.fit_layout(2, 2, 4) == (2, 2) and bench.fit_layout(2, 2, 8) == (2, 2)
    assert bench.fit_layout(2, 2, 2) == (1, 1) and bench.fit_layout(1, 1, 1) == (1, 1)


def test_the_mfu_bench_takes_more_overrides_for_side_by_side_variants(tmp_path):
    """``--set`` lands after the bench's own overrides (a device run compares variants of one recipe)."""
    bench = _bench_mfu()
    a = bench.parser().parse_args(["--set", "model.compile=off", "--set", "model.attention_dropout=0", "--anchor-after",
                                   "--head-chunk-mib", "1024"])
    cfg, _ = bench.load_recipe(a, str(tmp_path))
    assert cfg.model.compile == "off" and cfg.model.attention_dropout == 0 and cfg.model.hidden_dropout == 0.1
    assert a.anchor_after and a.head_chunk_mib == 1024


@pytest.mark.integration
def test_the_mfu_bench_times_the_anchor_in_the_same_run_on_cpu(tmp_path):
    """`bench_mfu --quick --device cpu --anchor`: our step and the plain PyTorch GPT of the same shape, one process."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_mfu.py"), "--quick", "--device", "cpu",
                          "--anchor", "--iters", "1", "--warmup", "1", "--precision", "fp32", "--json",
                          str(tmp_path / "mfu.json"), "--profile", "prof"], capture_output=True, text=True, timeout=600,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    f = json.loads((tmp_path / "mfu.json").read_text())
    # --profile: two more iterations after the timed one, profiled; the timed figures leave them out
    assert f["timed_iterations"] == 1 and f["profile"]["iterations"] == [3, 4] and f["profile"]["groups"]["matmul"] > 0
    assert sorted(p.name for p in (tmp_path / "prof").iterdir()) == [
        "rank0-iters3-4.summary.json", "rank0-iters3-4.trace.json.gz", "rank0-iters3-4.txt"]
    ours, anchor_line = out.stdout.strip().splitlines()[-3:-1]
    assert ours.startswith("profile of iterations 3-4: ") and " matmul " in ours
    assert anchor_line.startswith("anchor profile of iterations 3-4: ") and " matmul " in anchor_line
    assert f["anchor"]["profile"]["iterations"] == [3, 4] and f["anchor"]["timed_iterations"] == 1
    anchor = f["anchor"]
    assert anchor["timed_iterations"] == 1 and anchor["tokens_per_s"] > 0 and anchor["compiled_blocks"] is False
    assert f["ratio_vs_anchor"] == pytest.approx(f["tokens_per_s"] / anchor["tokens_per_s"], rel=1e-12)
    assert anchor["model_tflops"] == pytest.approx(f["flops_per_iteration"]["model"] / anchor["step_time_s"] / 1e12)
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("anchor (plain PyTorch GPT, SDPA causal, eager blocks, fused AdamW): step ")
    assert last.endswith(f"ours / anchor = {f['ratio_vs_anchor']:.2f}x tokens/s")
    assert f["layout"] == {"tp": 1, "pp": 1, "recipe_tp": 1, "recipe_pp": 1} and f["activation_checkpointing"] is False


def test_the_anchor_is_the_same_shape_and_work_as_the_model():
    """Parameters: the anchor has BLOOM's count (tied head, embedding LayerNorm, biases); the loss goes down."""
    import torch

    from benchmarks.anchor_gpt import AnchorGPT, AnchorShape
    from bloomtrain.model.config import ModelConfig

    m = ModelConfig.tiny()
    shape = AnchorShape(m.num_layers, m.hidden_size, m.num_heads, m.seq_length, m.padded_vocab_size(), 0.0, 0.0, 0.02)
    model = AnchorGPT(shape)
    assert sum(p.numel() for p in model.parameters()) == m.num_parameters()
    ids = torch.randint(0, m.padded_vocab_size(), (2, m.seq_length + 1), generator=torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0]


def test_bench_model_draws_its_ids_on_the_cpu_for_every_device():
    """bench_model --device cuda drew with a CPU generator on CUDA (an error there); the ids are now drawn on the
    CPU and moved, the same batch on every device."""
    import torch

    spec = importlib.util.spec_from_file_location("_bench_model", ROOT / "benchmarks" / "bench_model.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cpu = bench.token_batch(100, 2, 7, "cpu")
    assert cpu.shape == (2, 8)
    assert torch.equal(cpu, torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0)))
    assert bench.token_batch(100, 2, 7, "meta").device.type == "meta"


def test_the_speed_run_fits_its_budget_and_every_command_parses():
    """``--speed``: the next device run in one script, under 8 minutes: bloom-560m profiled beside the anchor with
    the compile logs on, the head against its GEMMs, the flash tiles at hd 64 and 128 with dropout 0.1, micro-batch
    8."""
    checks = gpu_check.speed_plan(python="PY")
    assert [c.name for c in checks] == ["mfu-bloom-560m", "bench_head_loss", "flash_tiles", "mfu-bloom-560m-mbs8"]
    assert gpu_check.SPEED_BUDGET_S <= 8 * 60 and all(c.timeout_s < gpu_check.SPEED_BUDGET_S for c in checks)
    parsed = {c.name: _script_parser(Path(c.args[1]).stem).parse_args(c.args[2:]) for c in checks}
    first, mbs8 = parsed["mfu-bloom-560m"], parsed["mfu-bloom-560m-mbs8"]
    assert first.anchor and first.profile and first.preset == mbs8.preset == "bloom-560m" and first.mbs == 4
    assert mbs8.mbs == 8 and not mbs8.anchor and mbs8.gbs == first.gbs  # the same tokens a step, half the micro-steps
    assert all(c.env == {"TORCH_LOGS": "recompiles,graph_breaks"} for c in checks if c.name.startswith("mfu-"))
    assert parsed["bench_head_loss"].device == "cuda" and parsed["bench_head_loss"].hidden == 1024
    assert parsed["flash_tiles"].head_dims == [64, 128] and parsed["flash_tiles"].dropout == [0.1]
    assert all(c.json_out in c.args for c in checks)


@pytest.mark.integration
def test_the_budget_stops_what_would_start_too_late_and_the_logs_are_counted(tmp_path):
    logs = gpu_check.Check("logs", [sys.executable, "-c", "import json; json.dump({}, open('f.json', 'w')); print("
                           "'Recompiling function forward in x.py\\nGraph break in user code at y.py:3\\n"
                           "Graph break (user stack suppressed) in user code')"], 60, "f.json",
                           gpu_check.judge_compile_logs)
    slow = gpu_check.Check("slow", [sys.executable, "-c", "import time; time.sleep(60)"], 60)
    late = gpu_check.Check("late", [sys.executable, "-c", "pass"], 60)
    report = gpu_check.run_all([logs, slow, late], tmp_path, DEVICE, quick=False, budget_s=25, speed=True)
    first, second, third = report.checks
    assert first.passed and first.figures == {"recompiles": 1, "graph_breaks": 2}
    assert not second.passed and second.detail.startswith("timed out after") and second.seconds < 30
    assert not third.passed and third.returncode is None
    assert third.detail == "not run: the run's budget of 25 s was spent"
    assert report.speed and "(--speed)" in (tmp_path / "gpu_report.md").read_text()


def test_the_speed_runs_figures_read_in_the_report(tmp_path):
    head = {"fused": {"step_time_s": 0.02}, "unfused": {"step_time_s": 0.05}, "gemms": {"step_time_s": 0.0125},
            "fused_over_gemms": 1.6, "ratio": 2.5}
    tiles = {"hd64_p0.1": {"plan": {"fwd": [64, 64, 4, 3], "dkdv": [64, 64, 8, 3], "dq": [64, 32, 4, 4]},
                           "fwd": [[[128, 64, 8, 3], 0.25, None], [[64, 64, 4, 3], 0.27, None]],
                           "dkdv": [[[64, 64, 8, 3], 0.4, None], [[128, 64, 8, 2], None, "OutOfResources: shared"]],
                           "dq": [[[64, 32, 4, 4], 0.26, None]]}}
    mbs8 = dict(MFU, micro_batch=8, tokens_per_s=72089.6, anchor=None, ratio_vs_anchor=None, profile=None,
                recompiles=0, graph_breaks=0)
    checks = [CheckResult(name="mfu-bloom-560m", command="c", passed=True, seconds=200.0, returncode=0,
                          figures=dict(MFU, recompiles=2, graph_breaks=0)),
              CheckResult(name="bench_head_loss", command="c", passed=True, seconds=40.0, returncode=0, figures=head),
              CheckResult(name="flash_tiles", command="c", passed=True, seconds=90.0, returncode=0, figures=tiles),
              CheckResult(name="mfu-bloom-560m-mbs8", command="c", passed=True, seconds=120.0, returncode=0,
                          figures=mbs8)]
    md = gpu_check.report_markdown(_report(checks))
    assert "MFU 9.1%, 0.80x the anchor, 2 recompiles, 0 graph breaks |" in md
    assert "| flash_tiles | pass | 90 | hd64_p0.1: best fwd + dK/dV + dQ 0.910 ms |" in md
    assert "| its three GEMMs alone | 0.0125 |" in md and "| fused / GEMMs | 1.60x |" in md
    assert "| fwd | [64, 64, 4, 3] | 0.270 | [128, 64, 8, 3] | 0.250 |" in md
    assert "| dkdv | [64, 64, 8, 3] | 0.400 | [64, 64, 8, 3] | 0.400 |" in md
    assert "micro-batch 8 against 4: 72,090 against 65,536 tokens/s (x1.10;" in md
    assert "| matmul | 500.0 | 450.0 |" in md  # the kernel groups, ours beside the anchor's
