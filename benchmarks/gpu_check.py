"""``make gpu-check``: does this stack work on this GPU machine, and how fast? One command, one report.

    python benchmarks/gpu_check.py --out gpu_report          # what `make gpu-check` runs
    python benchmarks/gpu_check.py --out gpu_report --quick  # smaller shapes and fewer repeats (minutes)
    python benchmarks/gpu_check.py --out gpu_report --speed  # the speed run: under 8 minutes (make gpu-speed)

On a machine with CUDA, in order (each a subprocess with its log in OUT/logs/, a failure does not stop the next):

1. ``build-kernels``: ``bloomtrain build-kernels --cuda`` compiles the fused CPU+CUDA kernels;
2. ``kernel-selfcheck``: the first-use self-check of every fused kernel on the GPU in bf16, fp16 and fp32
   (``bloomtrain.kernels.selfcheck``, what ``model.kernels: auto`` runs before training);
3. ``pytest-gpu``: ``pytest -m gpu`` over the test files that hold a gpu-marked test (``gpu_test_files``: CUDA
   kernels against PyTorch, the CLI training on one GPU), so that a GPU machine with only the ``train`` extra
   (and pytest) installed collects them: the other test files import Prefect, Dask's CLI, megatron-core...;
4. the GPU rows of ``bench_kernels``, ``bench_model``, ``bench_head_loss`` (bloom-560m's head and loss, fused
   against unfused), ``bench_train`` and ``bench_eval`` (``--device cuda``);
5. ``mfu-bloom-560m`` and ``mfu-bloom-1b7``: ``bench_mfu.py --anchor``, a training step of each shape on one GPU
   in bf16 at its recipe's own settings (dropout 0.1, recompute as the recipe says; TP = PP = 1): model TFLOP/s
   per GPU as Megatron-LM counts them (bloomtrain.metrics) and MFU against the card's dense bf16 peak, hardware
   TFLOP/s (the recomputed forwards counted) and HFU, peak memory; and in the same process the plain PyTorch GPT of the
   same shape (benchmarks/anchor_gpt.py): its tokens/s, MFU and peak memory, and ours over its tokens/s; then two more
   iterations under torch.profiler (``--profile``): the device's busy share and its time by kernel group.

It writes OUT/gpu_report.json (``GpuReport``: device, driver, torch/CUDA versions, each check's pass/fail and
figures) and OUT/gpu_report.md, and exits 0 only when every check passed, 1 otherwise. A check passes when its
command exits 0 (and, for pytest, ran at least one test with no failure, error or skip; for the self-check,
every kernel passed). Speed goals are figures, not checks: the report shows them, a slow card is not a broken
one. Without CUDA it prints one line and exits 2 (nothing to check).

``--speed`` runs ``speed_plan`` instead, within ``SPEED_BUDGET_S`` in all (under 8 minutes, so that a 15-minute
device lease can run it twice): bloom-560m profiled beside the anchor under ``TORCH_LOGS=recompiles,graph_breaks``
(the report counts both), the fused head against its three GEMMs, the flash kernels' tiles at hd 64 and 128 with
dropout 0.1, and bloom-560m at micro-batch 8; the report puts each kernel group's time beside the anchor's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
if str(ROOT) not in sys.path:  # run as a script: benchmarks/ is sys.path[0], the repository is not
    sys.path.insert(0, str(ROOT))

from benchmarks.gpu_report import (  # noqa: E402  (re-exported: tests and callers read them from here)
    CheckResult,
    DeviceInfo,
    GpuReport,
    figure_cells,
    report_markdown,
    write_report,
)

__all__ = ["CheckResult", "DeviceInfo", "GpuReport", "report_markdown", "write_report"]

@dataclass
class Check:
    """One step: a command, and how its output becomes a result."""

    name: str
    args: list[str]
    timeout_s: float
    json_out: str | None = None
    """The file the command writes its figures to (``--json``), relative to OUT."""
    judge: Callable[[CheckResult, Path], CheckResult] | None = None
    env: dict[str, str] = field(default_factory=dict)


# --- what runs ------------------------------------------------------------------------------------------------


def plan(quick: bool, python: str = sys.executable) -> list[Check]:
    """The checks of a GPU machine, in order (``quick``: smaller shapes, fewer repeats)."""
    py = [python]
    kernels = [*py, str(BENCH / "bench_kernels.py"), "--device", "cuda", "--json", "figures/bench_kernels.json"]
    model = [*py, str(BENCH / "bench_model.py"), "--device", "cuda", "--dtype", "bfloat16", "--kernels", "fused",
             "--preset", "bloom-560m", "--layers", "4" if quick else "24", "--seq", "2048", "--batch", "4",
             "--json", "figures/bench_model.json"]
    head = [*py, str(BENCH / "bench_head_loss.py"), "--device", "cuda", "--dtype", "bfloat16", "--hidden", "1024",
            "--tokens", "8192", "--json", "figures/bench_head_loss.json"]
    train = [*py, str(BENCH / "bench_train.py"), "--device", "cuda", "--precision", "bf16", "--layers", "4",
             "--hidden", "1024", "--heads", "16", "--seq", "1024", "--vocab", "50304", "--mbs", "4", "--gbs", "16",
             "--iters", "4" if quick else "10", "--json", "figures/bench_train.json"]
    evaluate = [*py, str(BENCH / "bench_eval.py"), "--device", "cuda", "--dtype", "bfloat16", "--layers",
                "4" if quick else "0", "--context", "2048", "--docs", "16" if quick else "64", "--batch", "8",
                "--check", "--json-out", "figures/bench_eval.json"]
    checks = [
        Check("build-kernels", [*py, "-m", "bloomtrain.cli", "build-kernels", "--cuda"], 1800),
        Check("kernel-selfcheck", [*py, str(BENCH / "gpu_check.py"), "--selfcheck-json", "figures/selfcheck.json"],
              600, "figures/selfcheck.json", judge_selfcheck),
        Check("pytest-gpu", [*py, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
                             "--junitxml", "figures/pytest_gpu.xml", *map(str, gpu_test_files())], 3600,
              judge=judge_pytest),
        Check("bench_kernels", kernels + (["--quick"] if quick else []), 1800, "figures/bench_kernels.json"),
        Check("bench_model", model, 1200, "figures/bench_model.json"),
        Check("bench_head_loss", head, 1200, "figures/bench_head_loss.json"),
        Check("bench_train", train, 1200, "figures/bench_train.json"),
        Check("bench_eval", evaluate, 1200, "figures/bench_eval.json", judge_eval),
    ]
    for preset in ("bloom-560m", "bloom-1b7"):
        out = f"figures/mfu_{preset}.json"
        checks.append(Check(f"mfu-{preset}", [*py, str(BENCH / "bench_mfu.py"), "--preset", preset, "--device",
                                               "cuda", "--anchor", "--iters", "3" if quick else "8", "--json", out,
                                               "--profile", f"figures/profile_{preset}"], 1800, out))
    return checks


SPEED_BUDGET_S = 480  # --speed, all checks together: under 8 minutes of a 15-minute device lease, so it can rerun
COMPILE_LOGS = {"TORCH_LOGS": "recompiles,graph_breaks"}


def speed_plan(python: str = sys.executable) -> list[Check]:
    """``--speed``: the next device run (issue 49), most telling first, within ``SPEED_BUDGET_S``: bloom-560m at the
    recipe's settings with the anchor in the same process, profiled, under ``TORCH_LOGS=recompiles,graph_breaks``;
    the fused head and loss against its three GEMMs; the flash kernels' tiles at hd 64 and 128, dropout 0.1 (the
    launch plan's own tiles among them); bloom-560m at micro-batch 8 (its step time per token against micro-batch
    4's: a large drop means the host, not the GPU, limits the step)."""
    py = [python]
    mfu = [*py, str(BENCH / "bench_mfu.py"), "--preset", "bloom-560m", "--device", "cuda", "--iters", "5",
           "--warmup", "3"]
    out, mbs8 = "figures/mfu_bloom-560m.json", "figures/mfu_bloom-560m_mbs8.json"
    head = [*py, str(BENCH / "bench_head_loss.py"), "--device", "cuda", "--dtype", "bfloat16", "--hidden", "1024",
            "--tokens", "8192", "--iters", "5", "--json", "figures/bench_head_loss.json"]
    tiles = [*py, str(BENCH / "bench_flash_tiles.py"), "--head-dims", "64", "128", "--dropout", "0.1", "--quick",
             "--json", "figures/flash_tiles.json"]
    return [
        Check("mfu-bloom-560m", [*mfu, "--anchor", "--json", out, "--profile", "figures/profile_bloom-560m"], 210, out,
              judge_compile_logs, COMPILE_LOGS),
        Check("bench_head_loss", head, 75, "figures/bench_head_loss.json"),
        Check("flash_tiles", tiles, 100, "figures/flash_tiles.json"),
        Check("mfu-bloom-560m-mbs8", [*mfu, "--mbs", "8", "--json", mbs8], 150, mbs8, judge_compile_logs,
              COMPILE_LOGS),
    ]


_RECOMPILE = re.compile(r"Recompiling function")
_GRAPH_BREAK = re.compile(r"Graph break\b")


def judge_compile_logs(result: CheckResult, out: Path) -> CheckResult:
    """Figures, not a verdict: how many recompiles and graph breaks ``TORCH_LOGS`` wrote into the check's log."""
    text = (out / result.log).read_text(errors="replace") if result.log else ""
    counts = {"recompiles": len(_RECOMPILE.findall(text)), "graph_breaks": len(_GRAPH_BREAK.findall(text))}
    return result.model_copy(update={"figures": {**result.figures, **counts}})


GPU_MARK = re.compile(r"^\s*(@pytest\.mark\.gpu\b|pytestmark\s*=.*\bgpu\b)", re.MULTILINE)


def gpu_test_files(tests: Path = ROOT / "tests") -> list[Path]:
    """The test files holding a gpu-marked test (``@pytest.mark.gpu`` or a module ``pytestmark`` naming gpu)."""
    return [path for path in sorted(tests.rglob("test_*.py")) if GPU_MARK.search(path.read_text())]


def run_check(check: Check, out: Path) -> CheckResult:
    """Run one check in ``out`` (its relative paths land there), its output to logs/<name>.log."""
    log = out / "logs" / f"{check.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(exist_ok=True)
    started = time.perf_counter()
    command = shlex.join(check.args)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **check.env}
    env.pop("DS_ACCELERATOR", None)  # DeepSpeed picks CUDA
    try:
        with open(log, "w") as sink:
            proc = subprocess.run(check.args, cwd=out, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                  timeout=check.timeout_s)
        rc, why = proc.returncode, None
    except subprocess.TimeoutExpired:
        rc, why = None, f"timed out after {check.timeout_s:.0f} s"
    except OSError as exc:
        rc, why = None, f"did not start: {exc}"
    result = CheckResult(name=check.name, command=command, passed=rc == 0, seconds=time.perf_counter() - started,
                         returncode=rc, log=str(log.relative_to(out)))
    if check.json_out and (out / check.json_out).is_file():
        result.figures = json.loads((out / check.json_out).read_text())
    elif check.json_out and rc == 0:
        result.passed, why = False, f"exited 0 without writing {check.json_out}"
    if check.judge is not None:
        result = check.judge(result, out)
    if not result.passed and result.detail is None:
        result.detail = why or tail(log)
    return result


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def judge_pytest(result: CheckResult, out: Path) -> CheckResult:
    """Passed: exit 0, at least one test, no failure, error or skip (a skipped GPU test means a missing piece)."""
    try:
        suites = ET.parse(out / "figures" / "pytest_gpu.xml").getroot()
    except (OSError, ET.ParseError):
        return result.model_copy(update={"passed": False})
    counts = {k: 0 for k in ("tests", "failures", "errors", "skipped")}
    for suite in suites.iter("testsuite"):
        for key in counts:
            counts[key] += int(suite.get(key, 0))
    skipped = [f"{case.get('classname')}::{case.get('name')}: {s.get('message', '')}"
               for case in suites.iter("testcase") for s in case.findall("skipped")]
    ok = result.returncode == 0 and counts["tests"] > 0 and not (counts["failures"] or counts["errors"] or skipped)
    detail = None if ok or not skipped else "skipped: " + "; ".join(skipped)
    return result.model_copy(update={"passed": ok, "figures": {**counts, "skipped_tests": skipped},
                                     "detail": detail})


def judge_selfcheck(result: CheckResult, out: Path) -> CheckResult:
    failed = [f"{c['kernel']} {c['dtype']}: {c['reason']}" for c in result.figures.get("checks", []) if not c["fused"]]
    ok = result.passed and bool(result.figures.get("checks")) and not failed
    return result.model_copy(update={"passed": ok, "detail": "; ".join(failed) or None})


def judge_eval(result: CheckResult, out: Path) -> CheckResult:
    """bench_eval --check: ``bloomtrain evaluate``'s NLL agrees with the plain loop (bf16: within 1e-2)."""
    diff = result.figures.get("nll_relative_difference")
    ok = result.passed and diff is not None and diff <= 1e-2
    return result.model_copy(update={"passed": ok, "detail": None if ok or diff is None else
                                     f"evaluate's NLL differs from the reference loop by {diff:.2g} (> 1e-2)"})


def selfcheck_main(path: str) -> int:
    """``--selfcheck-json``: the fused kernels' self-check on the GPU in each training dtype, as JSON."""
    import torch

    from bloomtrain.kernels import selfcheck

    device = torch.device("cuda")
    checks = [c.as_dict() for dtype in (torch.bfloat16, torch.float16, torch.float32)
              for c in selfcheck.check(device, dtype).values()]
    checks += [selfcheck.check_flash(device, dtype, head_dim).as_dict()  # BLOOM's head dims: 64 (560m), 128 (176B)
               for dtype in (torch.bfloat16, torch.float16, torch.float32) for head_dim in (64, 128)]
    Path(path).write_text(json.dumps({"checks": checks}, indent=1) + "\n")
    return 0 if all(c["fused"] for c in checks) else 1


# --- the device ----------------------------------------------------------------------------------------------


def _command_output(args: list[str]) -> str | None:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def device_info() -> DeviceInfo:
    import torch

    props = torch.cuda.get_device_properties(0)
    driver = _command_output(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    nvcc = _command_output(["nvcc", "--version"])
    try:
        import deepspeed

        ds_version = deepspeed.__version__
    except Exception:  # noqa: BLE001 - a broken DeepSpeed is reported by the checks that need it
        ds_version = None
    return DeviceInfo(
        gpu=props.name, gpu_count=torch.cuda.device_count(), compute_capability=f"{props.major}.{props.minor}",
        memory_gib=round(props.total_memory / 2**30, 1), driver=driver.splitlines()[0] if driver else None,
        cuda_runtime=torch.version.cuda, nvcc=nvcc.splitlines()[-1] if nvcc else None, torch=torch.__version__,
        cudnn=str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
        deepspeed=ds_version, python=platform.python_version(), host=platform.node())


def no_cuda_line() -> str | None:
    """The one line said on a machine where there is nothing to check, or None when CUDA is there."""
    import torch

    if torch.cuda.is_available():
        return None
    why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
    return (f"gpu-check: no CUDA GPU here (torch {torch.__version__}: {why}); run it on a machine with an NVIDIA "
            "GPU and a CUDA build of torch (docs/install.md)")



def run_all(checks: list[Check], out: Path, device: DeviceInfo, quick: bool, budget_s: float | None = None,
            speed: bool = False) -> GpuReport:
    """Run ``checks`` in order, the report rewritten after each. ``budget_s``: all of them within it (a check's
    timeout shrinks to what is left; one that would start with under 20 s left does not run and fails)."""
    results: list[CheckResult] = []
    deadline = None if budget_s is None else time.monotonic() + budget_s
    for check in checks:
        print(f"gpu-check: {check.name} ...", flush=True)
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left < 20:
            results.append(CheckResult(name=check.name, command=shlex.join(check.args), passed=False, seconds=0.0,
                                       returncode=None, detail=f"not run: the run's budget of {budget_s:.0f} s "
                                       "was spent"))
        else:
            results.append(run_check(check if left is None else replace(check, timeout_s=min(check.timeout_s, left)),
                                     out))
        r = results[-1]
        print(f"gpu-check: {check.name} {'pass' if r.passed else 'FAIL'} ({r.seconds:.0f} s) {figure_cells(r)}",
              flush=True)
        report = GpuReport(created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                           passed=all(c.passed for c in results) and len(results) == len(checks), quick=quick,
                           speed=speed, device=device, checks=results)
        write_report(report, out)  # after every check: a killed run still leaves what it measured
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="gpu_report", help="directory for gpu_report.md/json, logs/ and figures/")
    p.add_argument("--quick", action="store_true", help="smaller shapes and fewer repeats")
    p.add_argument("--speed", action="store_true", help=f"the speed run instead (speed_plan: bloom-560m profiled "
                   f"beside the anchor, the head against its GEMMs, the flash tiles, micro-batch 8), within "
                   f"{SPEED_BUDGET_S} s")
    p.add_argument("--only", action="append", default=[], help="run only this check (repeatable; by name)")
    p.add_argument("--selfcheck-json", help=argparse.SUPPRESS)  # the kernel-selfcheck step's own subprocess
    a = p.parse_args(argv)
    if a.selfcheck_json:
        return selfcheck_main(a.selfcheck_json)
    line = no_cuda_line()
    if line is not None:
        print(line, file=sys.stderr)
        return 2
    checks = [c for c in (speed_plan() if a.speed else plan(a.quick)) if not a.only or c.name in a.only]
    out = Path(a.out).resolve()
    report = run_all(checks, out, device_info(), a.quick, SPEED_BUDGET_S if a.speed else None, a.speed)
    print(f"gpu-check: {'PASSED' if report.passed else 'FAILED'} ({sum(c.passed for c in report.checks)} of "
          f"{len(report.checks)} checks); report: {out / 'gpu_report.md'}")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main())
