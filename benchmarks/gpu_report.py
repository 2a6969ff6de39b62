"""gpu_check's report: its JSON schema (``GpuReport``) and its Markdown (benchmarks/gpu_check.py writes both).

The Markdown: the device, one row per check, the training-step table (ours beside the plain PyTorch GPT anchor of
the same shape), where the profiled steps' device time went by kernel group (ours beside the anchor's), the speed
run's figures (``gpu_check.py --speed``: the head's loss against its three GEMMs, the flash kernels' tiles, the
step at micro-batch 8 against 4, recompiles and graph breaks), and the failures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

SCHEMA_VERSION = 1


class DeviceInfo(BaseModel):
    """The machine the report is about."""

    model_config = ConfigDict(extra="forbid")

    gpu: str
    gpu_count: int
    compute_capability: str
    memory_gib: float
    driver: str | None
    cuda_runtime: str | None
    """torch.version.cuda: the CUDA torch was built with."""
    nvcc: str | None
    """The toolkit that compiles the fused kernels (``nvcc --version``)."""
    torch: str
    cudnn: str | None
    deepspeed: str | None
    python: str
    host: str


class CheckResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    command: str
    passed: bool
    seconds: float
    returncode: int | None
    """None when the command did not start or timed out."""
    figures: dict[str, Any] = {}
    """What it measured (a benchmark's JSON), or the counts of a test run."""
    detail: str | None = None
    """Why it failed: the last lines of its output, or the reason."""
    log: str | None = None
    """Its full output, relative to the report's directory."""


class GpuReport(BaseModel):
    """gpu_report.json."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    created: str
    passed: bool
    quick: bool
    speed: bool = False
    """``gpu_check.py --speed``: the speed run's checks (``speed_plan``), not the full check."""
    device: DeviceInfo
    checks: list[CheckResult]


def figure_cells(check: CheckResult) -> str:
    """The figures a reader looks for first, one cell."""
    f = check.figures
    if check.name.startswith("mfu-") and f.get("model_tflops") is not None:
        ratio = f", {f['ratio_vs_anchor']:.2f}x the anchor" if f.get("ratio_vs_anchor") is not None else ""
        logs = (f", {f['recompiles']} recompiles, {f['graph_breaks']} graph breaks" if "recompiles" in f else "")
        return f"{f['model_tflops']:.1f} model TFLOP/s per GPU, MFU {_pct(f.get('mfu'))}{ratio}{logs}"
    if check.name == "flash_tiles" and f:
        return "; ".join(f"{key}: best fwd + dK/dV + dQ {sum(_best(f[key], k)[1] for k in KERNELS):.3f} ms"
                         for key in f if all(_best(f[key], k) for k in KERNELS))
    if check.name == "pytest-gpu" and "tests" in f:
        return f"{f['tests']} tests, {f['failures']} failed, {f['errors']} errors, {f['skipped']} skipped"
    if check.name == "kernel-selfcheck" and f.get("checks"):
        return f"{sum(c['fused'] for c in f['checks'])} of {len(f['checks'])} kernel x dtype checks fused"
    for key in ("ratio", "ratio_vs_forward", "ratio_ours_over_transformers"):
        if isinstance(f.get(key), int | float):
            return f"{key} {f[key]:.3f}"
    return ""


def _pct(x: float | None) -> str:
    return f"{100 * x:.1f}%" if x is not None else "n/a"


def _gib(x: float | None) -> str:
    return f"{x:.1f}" if x is not None else "n/a"


def mfu_rows(report: GpuReport) -> list[str]:
    rows = ["| shape | layers x hidden, seq | TP x PP | micro x accumulation | dropout | activation checkpointing | "
            "step s | tokens/s | model TFLOP/s | MFU | hardware TFLOP/s | HFU | peak GiB | anchor tokens/s | "
            "anchor MFU | anchor peak GiB | ours / anchor |",
            "|---|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in report.checks:
        f = c.figures
        if not c.name.startswith("mfu-") or f.get("step_time_s") is None:
            continue
        layout, dropout, anchor = f.get("layout", {}), f.get("dropout", {}), f.get("anchor") or {}
        ratio = f"{f['ratio_vs_anchor']:.2f}x" if f.get("ratio_vs_anchor") is not None else "n/a"
        anchor_tokens = f"{anchor['tokens_per_s']:,.0f}" if anchor else "n/a"
        rows.append(f"| {f['preset']} | {f['shape']['layers']} x {f['shape']['hidden']}, {f['shape']['seq']} | "
                    f"{layout.get('tp', '?')} x {layout.get('pp', '?')} | "
                    f"{f['micro_batch']} x {f['global_batch'] // f['micro_batch']} | "
                    f"{dropout.get('hidden', '?')}/{dropout.get('attention', '?')} | "
                    f"{'on' if f['activation_checkpointing'] else 'off'} | {f['step_time_s']:.3f} | "
                    f"{f['tokens_per_s']:,.0f} | {f['model_tflops']:.1f} | {_pct(f.get('mfu'))} | "
                    f"{f['hw_tflops']:.1f} | {_pct(f.get('hfu'))} | {_gib(f.get('memory_gib'))} | {anchor_tokens} | "
                    f"{_pct(anchor.get('mfu'))} | {_gib(anchor.get('memory_gib'))} | {ratio} |")
    return rows


def profile_rows(report: GpuReport, top: int = 8) -> list[str]:
    """Where each training step's device time went (bench_mfu --profile): busy share and groups, ours beside the
    anchor's, then our largest kernels."""
    lines: list[str] = []
    for c in report.checks:
        pr = c.figures.get("profile") if c.name.startswith("mfu-") else None
        if not pr:
            continue
        an = (c.figures.get("anchor") or {}).get("profile") or {"groups": {}, "wall_ms": None, "busy": None}
        wall = f"{an['wall_ms']:.0f}" if an["wall_ms"] is not None else "n/a"
        lines += [f"### {c.figures['preset']}, iterations {pr['iterations'][0]}-{pr['iterations'][1]}", "",
                  "| | ours ms | anchor ms |", "|---|---:|---:|",
                  f"| wall (the profiled steps) | {pr['wall_ms']:.0f} | {wall} |",
                  f"| device busy | {_pct(pr.get('busy'))} | {_pct(an.get('busy'))} |"]
        for group in dict.fromkeys([*pr["groups"], *an["groups"]]):
            ours, theirs = pr["groups"].get(group), an["groups"].get(group)
            lines.append(f"| {group} | {ours or 0:.1f} | {theirs or 0:.1f} |")
        lines += ["", "| our kernel | ms | calls | share |", "|---|---:|---:|---:|"]
        lines += [f"| `{r['name'][:100]}` | {r['ms']:.1f} | {r['calls']} | {r['share']:.1%} |" for r in pr["top"][:top]]
        lines.append("")
    return lines


KERNELS = ("fwd", "dkdv", "dq")  # bench_flash_tiles' kernels


def _best(sweep: dict, kernel: str) -> tuple[list[int], float] | None:
    """The fastest tiles of one kernel in a bench_flash_tiles sweep (rows fastest first; failed rows have no ms)."""
    rows = [r for r in sweep.get(kernel, []) if r[1] is not None]
    return (rows[0][0], rows[0][1]) if rows else None


def _ms_of(sweep: dict, kernel: str, tiles: list[int]) -> str:
    found = [r for r in sweep.get(kernel, []) if list(r[0]) == list(tiles)]
    return f"{found[0][1]:.3f}" if found and found[0][1] is not None else (found[0][2] if found else "n/a")


def speed_rows(report: GpuReport) -> list[str]:
    """The speed run's figures besides the step tables: the head against its GEMMs, the flash kernels' plan tiles
    against the fastest swept, micro-batch 8 against 4 per token."""
    f = {c.name: c.figures for c in report.checks}
    lines: list[str] = []
    head = f.get("bench_head_loss") or {}
    if head.get("gemms"):
        lines += ["| LM head + loss, forward + backward | s |", "|---|---:|",
                  *(f"| {label} | {head[key]['step_time_s']:.4f} |" for key, label in (
                      ("fused", "fused, chunked"), ("unfused", "unfused (logits, then the loss)"),
                      ("gemms", "its three GEMMs alone"))),
                  f"| fused / GEMMs | {head['fused_over_gemms']:.2f}x |", ""]
    for key, sweep in (f.get("flash_tiles") or {}).items():
        lines += [f"| flash {key} | plan tiles | plan ms | fastest tiles | fastest ms |", "|---|---|---:|---|---:|"]
        for kernel in KERNELS:
            planned, best = sweep.get("plan", {}).get(kernel), _best(sweep, kernel)
            lines.append(f"| {kernel} | {planned} | {_ms_of(sweep, kernel, planned) if planned else 'n/a'} | "
                         f"{best[0] if best else 'n/a'} | {f'{best[1]:.3f}' if best else 'n/a'} |")
        lines.append("")
    mbs4, mbs8 = f.get("mfu-bloom-560m") or {}, f.get("mfu-bloom-560m-mbs8") or {}
    if mbs4.get("tokens_per_s") and mbs8.get("tokens_per_s"):
        lines.append(f"bloom-560m, micro-batch 8 against 4: {mbs8['tokens_per_s']:,.0f} against "
                     f"{mbs4['tokens_per_s']:,.0f} tokens/s (x{mbs8['tokens_per_s'] / mbs4['tokens_per_s']:.2f}; a "
                     "large gain says the host, not the GPU, limits the step).")
    return lines


def report_markdown(report: GpuReport) -> str:
    d = report.device
    lines = [f"# gpu-check: {'PASSED' if report.passed else 'FAILED'} on {d.gpu_count} x {d.gpu}", "",
             f"{report.created}, host {d.host}{' (--quick)' if report.quick else ''}"
             f"{' (--speed)' if report.speed else ''}", "",
             "| device | driver | CUDA (torch) | nvcc | torch | cuDNN | DeepSpeed | Python | memory |",
             "|---|---|---|---|---|---|---|---|---|",
             f"| {d.gpu} (sm {d.compute_capability}) | {d.driver} | {d.cuda_runtime} | {d.nvcc} | {d.torch} | "
             f"{d.cudnn} | {d.deepspeed} | {d.python} | {d.memory_gib} GiB |", "",
             "| check | result | seconds | figures |", "|---|---|---:|---|"]
    lines += [f"| {c.name} | {'pass' if c.passed else '**FAIL**'} | {c.seconds:.0f} | {figure_cells(c)} |"
              for c in report.checks]
    lines += ["", "## Training step, one GPU", "",
              "Model TFLOP/s per GPU as Megatron-LM counts them: l (72 h^2 + 6 h s) + 6 h V FLOPs per token (the "
              "causal attention halved, forward + backward three forwards), MFU = model TFLOP/s / the card's dense "
              "bf16 peak; hardware TFLOP/s and HFU add one more forward of every block, l (24 h^2 + 2 h s) per "
              "token, where activation checkpointing recomputes it (docs/bloom-training.md, \"FLOPs and MFU\"). "
              "The anchor: a plain "
              "PyTorch GPT of the same shape in the same process (SDPA causal attention without ALiBi, compiled "
              "blocks, fused AdamW, bf16 autocast, the recipe's dropout; benchmarks/anchor_gpt.py), its MFU by the "
              "same FLOP count; peak GiB: torch.cuda.max_memory_allocated of each.", "", *mfu_rows(report)]
    profiles = profile_rows(report)
    if profiles:
        lines += ["", "## Where the step's time goes (torch.profiler, two iterations after the timed ones)", "",
                  "Groups are read from kernel names (bloomtrain.callbacks.profile.GROUPS); traces in "
                  "figures/profile_<preset>/.", "", *profiles]
    speed = speed_rows(report)
    if speed:
        lines += ["", "## The speed run's kernels", "", *speed]
    failed = [c for c in report.checks if not c.passed]
    if failed:
        lines += ["", "## Failures", ""]
        for c in failed:
            lines += [f"### {c.name}", "", f"`{c.command}` (log: `{c.log}`)", "", "```", c.detail or "", "```", ""]
    return "\n".join(lines).rstrip() + "\n"


def write_report(report: GpuReport, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_report.json").write_text(report.model_dump_json(indent=1) + "\n")
    (out / "gpu_report.md").write_text(report_markdown(report))

