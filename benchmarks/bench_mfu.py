"""TFLOP/s per device and MFU of bloomtrain's training step for a BLOOM shape, as Megatron-LM counts them.

    python benchmarks/bench_mfu.py --preset bloom-560m --anchor    # one GPU, bf16, the recipe's settings
    python benchmarks/bench_mfu.py --preset bloom-1b7 --json out.json
    python benchmarks/bench_mfu.py --quick --device cpu --anchor   # the same paths on a tiny shape (tests)

The step is the trainer's own (``bloomtrain.train.build_trainer``: DeepSpeed's pipeline engine, ZeRO-1 and the
BF16 optimizer, fused kernels ``auto``) on the preset's recipe (``configs/train/<preset>.yaml``: its dropout,
recompute, init and optimizer; sequence 2048) with synthetic tokens, ``--iters`` timed iterations after
``--warmup``. It runs in one process unless launched with more (``WORLD_SIZE``): the recipe's TP x PP is kept
where the world size takes it, else TP = PP = 1 (``fit_layout``; bloom-1b7's TP 2 x PP 2 on one GPU).
``--activation-checkpointing`` / ``--no-activation-checkpointing`` override the recipe's recompute.
``--anchor`` also times a plain PyTorch GPT of the same shape in the same process (benchmarks/anchor_gpt.py,
first, so that each run's peak memory is its own; ``--anchor-after``: after ours) and prints our tokens/s over
its. To tell variants apart on one device: ``--set KEY=VALUE`` (more config overrides, e.g. ``model.compile=off``)
and ``--head-chunk-mib`` (the fused head's chunk budget). ``--profile DIR``: where the time goes, from two more
iterations under torch.profiler after the timed ones (bloomtrain.callbacks.profile: a trace, a table, and the
device time by group, with the share of the step the GPU was busy; the anchor's two as well, summed the same way).
The figures are the trainer's metrics (``bloomtrain.metrics``), medians over the timed iterations:

- ``model_tflops``: model FLOPs per second per device as Megatron-LM counts them (``bloomtrain.metrics``:
  ``l (72 h^2 + 6 h s) + 6 h V`` per token, the causal attention halved, forward + backward three times the
  forward), and ``mfu`` = model_tflops / the device's dense bf16 peak (``bloomtrain.metrics.device_peak_tflops``;
  none on a CPU);
- ``hw_tflops`` and ``hfu``: hardware FLOPs, the same plus one more forward of every block
  (``l (24 h^2 + 2 h s)`` per token) with activation checkpointing; equal to the model figures without it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PRESETS = ("bloom-560m", "bloom-1b7")
PROFILED = 2  # iterations profiled after the timed ones (--profile): the profiler slows the steps it records


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="bloom-560m", help="configs/train/<preset>.yaml (the shape and its recipe)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--mbs", type=int, default=4, help="micro-batch size")
    p.add_argument("--gbs", type=int, default=16, help="global batch size (gradient accumulation over micro-batches)")
    p.add_argument("--activation-checkpointing", action=argparse.BooleanOptionalAction, default=None,
                   help="recompute each block in backward (default: as the recipe says)")
    p.add_argument("--anchor", action="store_true", help="also time a plain PyTorch GPT of the same shape")
    p.add_argument("--anchor-compile", action=argparse.BooleanOptionalAction, default=None,
                   help="torch.compile the anchor's blocks (default: on CUDA; Inductor's CPU build of them takes "
                        "minutes on a small machine)")
    p.add_argument("--anchor-after", action="store_true",
                   help="time the anchor after our step instead of before it (does the order change either figure?)")
    p.add_argument("--head-chunk-mib", type=int, default=None,
                   help="the fused head's chunk budget on this device (fp32 logits; default: head_loss.CHUNK_BYTES)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="one more config override after the bench's own (repeatable), e.g. model.compile=off")
    p.add_argument("--iters", type=int, default=8, help="timed iterations")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations first")
    p.add_argument("--quick", action="store_true", help="a tiny shape (2 layers, hidden 64, seq 64): the path only")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help=f"profile {PROFILED} more iterations after the timed ones (torch.profiler, "
                        "logging.profile_iters) and copy their trace, table and summary into DIR")
    return p


def fit_layout(tp: int, pp: int, world_size: int) -> tuple[int, int]:
    """The recipe's (TP, PP) where ``world_size`` processes take it, else (1, 1): all data parallel."""
    return (tp, pp) if world_size % (tp * pp) == 0 else (1, 1)


def overrides(a: argparse.Namespace, log_dir: str, layout: tuple[int, int] = (1, 1)) -> list[str]:
    iters = a.warmup + a.iters + (PROFILED if a.profile else 0)
    out = [f"optim.precision={a.precision}", f"parallel.tp={layout[0]}", f"parallel.pp={layout[1]}",
           f"schedule.micro_batch_size={a.mbs}", f"schedule.global_batch_size={a.gbs}",
           "schedule.rampup_batch_size=null", "schedule.train_samples=null", f"schedule.train_iters={iters}",
           "schedule.warmup_samples=0", f"schedule.decay_samples={iters * a.gbs}", "data.kind=synthetic",
           "data.blend=null", f"data.synthetic_samples={iters * a.gbs}",
           "checkpoint.dir=null", "checkpoint.exit_duration_in_mins=null", f"logging.dir={log_dir}",
           "logging.tensorboard=false", "logging.eval_interval=null"]
    if a.activation_checkpointing is not None:
        out.append(f"parallel.activation_checkpointing={str(a.activation_checkpointing).lower()}")
    if a.profile:
        out.append(f"logging.profile_iters=[{a.warmup + a.iters + 1}, {iters}]")
    out += a.sets
    if a.quick:
        out += ["model.num_layers=2", "model.hidden_size=64", "model.num_heads=4", "model.seq_length=64",
                "model.vocab_size=512", "model.pad_vocab_size_to=512"]
    return out


def load_recipe(a: argparse.Namespace, log_dir: str):
    """The preset's recipe with the bench's overrides, its layout fitted to the world size."""
    import os

    from bloomtrain.config import load_config

    path = ROOT / "configs" / "train" / f"{a.preset}.yaml"
    recipe = load_config(path).parallel
    layout = fit_layout(recipe.tp, recipe.pp, int(os.environ.get("WORLD_SIZE", "1")))
    return load_config(path, overrides(a, log_dir, layout)), (recipe.tp, recipe.pp)


def run_anchor(a: argparse.Namespace, cfg) -> dict:
    from benchmarks.anchor_gpt import AnchorRun, AnchorShape, measure_anchor

    m, o = cfg.model, cfg.optim
    shape = AnchorShape(m.num_layers, m.hidden_size, m.num_heads, m.seq_length, m.padded_vocab_size(1),
                        m.hidden_dropout, m.attention_dropout, m.init_std)
    compile_blocks = a.device == "cuda" if a.anchor_compile is None else a.anchor_compile
    run = AnchorRun(a.mbs, a.gbs, a.iters, a.warmup, o.precision, o.lr, (o.beta1, o.beta2), o.eps, o.weight_decay,
                    o.clip_grad, compile_blocks, PROFILED if a.profile else 0)
    return measure_anchor(shape, run, _device(a.device))


def measure(a: argparse.Namespace) -> dict:
    import os

    if a.device == "cpu":
        os.environ["DS_ACCELERATOR"] = "cpu"
    from bloomtrain.metrics import device_peak_tflops, flops_per_iteration, read_precision
    from bloomtrain.parallel import head_loss
    from bloomtrain.train import build_trainer

    if a.head_chunk_mib is not None:
        head_loss.CHUNK_BYTES[a.device] = a.head_chunk_mib << 20
    with tempfile.TemporaryDirectory() as log_dir:
        cfg, recipe_layout = load_recipe(a, log_dir)
        # first by default: the trainer's peak memory is then its own (_release_cuda)
        anchor = run_anchor(a, cfg) if a.anchor and not a.anchor_after else None
        if a.device == "cuda":
            _release_cuda()
        build_trainer(cfg).fit()  # closes metrics.jsonl at the end
        if a.anchor and a.anchor_after:
            anchor = run_anchor(a, cfg)
        metrics = Path(log_dir) / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        precision = read_precision(metrics)
        profiled = Path(log_dir) / "profile"  # rank 0's (logging.profile_ranks' default)
        profile = _keep_profile(profiled, Path(a.profile)) if a.profile and profiled.is_dir() else None
    steps = [r for r in rows if "step_time_s" in r][a.warmup:a.warmup + a.iters]
    if not steps:
        raise SystemExit(f"bench_mfu: no timed iteration (--iters {a.iters}, --warmup {a.warmup})")
    m, tp, recompute = cfg.model, cfg.parallel.tp, cfg.parallel.activation_checkpointing

    def median(key: str) -> float | None:
        values = [r[key] for r in steps if key in r]
        return statistics.median(values) if values else None

    peak = device_peak_tflops(cfg.logging.peak_tflops)
    out = {
        "preset": a.preset, "device": a.device, "device_name": _device_name(a.device),
        "precision": precision.ran if precision else cfg.optim.precision,
        "precision_why": precision.why if precision else None,
        "shape": {"layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_heads, "seq": m.seq_length,
                  "vocab_padded": m.padded_vocab_size(tp)},
        "layout": {"tp": tp, "pp": cfg.parallel.pp, "recipe_tp": recipe_layout[0], "recipe_pp": recipe_layout[1]},
        "dropout": {"hidden": m.hidden_dropout, "attention": m.attention_dropout},
        "activation_checkpointing": recompute, "micro_batch": a.mbs, "global_batch": a.gbs,
        "timed_iterations": len(steps), "kernels": m.kernels,
        "flops_per_iteration": {"model": flops_per_iteration(m, a.gbs, tp, False),
                                "hardware": flops_per_iteration(m, a.gbs, tp, recompute)},
        "step_time_s": median("step_time_s"), "tokens_per_s": median("tokens_per_s"),
        "model_tflops": median("tflops"), "hw_tflops": median("hw_tflops"), "mfu": median("mfu"),
        "hfu": median("hfu"), "peak_tflops": peak, "memory_gib": median("memory_gib"),
    }
    if profile is not None:
        out["profile"] = profile
    if anchor is not None:
        out["anchor"] = _anchor_figures(anchor, out["flops_per_iteration"]["model"], peak)
        out["ratio_vs_anchor"] = out["tokens_per_s"] / anchor["tokens_per_s"]
    return out


def _keep_profile(profiled: Path, keep: Path) -> dict:
    """Copy rank 0's profile files into ``keep``; its summary (bloomtrain.callbacks.profile.ProfileSummary)."""
    import shutil

    keep.mkdir(parents=True, exist_ok=True)
    for path in sorted(profiled.iterdir()):
        shutil.copy2(path, keep / path.name)
    summary = next(keep.glob("rank0-*.summary.json"))
    return json.loads(summary.read_text())


def _anchor_figures(anchor: dict, model_flops: float, peak: float | None) -> dict:
    tflops = model_flops / anchor["step_time_s"] / 1e12
    return {**anchor, "model_tflops": tflops, "mfu": tflops / peak if peak else None}


def _release_cuda() -> None:
    """Free what the anchor left (its compiled blocks' caches hold its modules), so that the trainer's peak
    memory is its own."""
    import gc

    import torch

    torch._dynamo.reset()
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def _device(name: str):
    import torch

    return torch.device(name)


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def _pct(x: float | None) -> str:
    return f"{100 * x:.1f}%" if x is not None else "n/a (no peak for this device)"


def _profile_line(pr: dict) -> str:
    from bloomtrain.callbacks.profile import ProfileSummary

    summary = ProfileSummary.model_validate(pr)
    return f"profile of iterations {summary.iterations[0]}-{summary.iterations[1]}: {summary.headline()}"


def summary(r: dict) -> str:
    """The run in one line, and the anchor's in a second one."""
    layout = r["layout"]
    fitted = "" if (layout["tp"], layout["pp"]) == (layout["recipe_tp"], layout["recipe_pp"]) else \
        f" (recipe TP {layout['recipe_tp']} x PP {layout['recipe_pp']})"
    line = (f"{r['preset']} on {r['device_name']} ({r['precision']}), layers {r['shape']['layers']} hidden "
            f"{r['shape']['hidden']} seq {r['shape']['seq']}, TP {layout['tp']} x PP {layout['pp']}{fitted}, "
            f"micro-batch {r['micro_batch']} x {r['global_batch'] // r['micro_batch']}, dropout "
            f"{r['dropout']['hidden']}/{r['dropout']['attention']}, activation checkpointing "
            f"{'on' if r['activation_checkpointing'] else 'off'}: step {r['step_time_s']:.3f} s, "
            f"{r['tokens_per_s']:,.0f} tokens/s, model TFLOP/s per device {r['model_tflops']:.2f}, MFU "
            f"{_pct(r['mfu'])}, hardware TFLOP/s {r['hw_tflops']:.2f}, HFU {_pct(r['hfu'])}")
    for who, figures in (("", r), ("anchor ", r.get("anchor", {}))):
        if "profile" in figures:
            line += f"\n{who}{_profile_line(figures['profile'])}"
    if "anchor" in r:
        an = r["anchor"]
        memory = "" if an["memory_gib"] is None else f", peak {an['memory_gib']:.1f} GiB (ours {r['memory_gib']:.1f})"
        blocks = "compiled blocks" if an["compiled_blocks"] else "eager blocks"
        line += (f"\nanchor (plain PyTorch GPT, SDPA causal, {blocks}, fused AdamW): step "
                 f"{an['step_time_s']:.3f} s, {an['tokens_per_s']:,.0f} tokens/s, MFU {_pct(an['mfu'])}{memory}; "
                 f"ours / anchor = {r['ratio_vs_anchor']:.2f}x tokens/s")
    return line


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("bench_mfu: --device cuda needs a GPU; none found (use --device cpu for the path alone)",
                  file=sys.stderr)
            return 2
    r = measure(a)
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1) + "\n")
    print(summary(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
