"""TFLOP/s per device and MFU of bloomtrain's training step for a BLOOM shape, as Megatron counts them.

    python benchmarks/bench_mfu.py --preset bloom-560m             # one GPU, bf16, activation checkpointing on
    python benchmarks/bench_mfu.py --preset bloom-1b7 --json out.json
    python benchmarks/bench_mfu.py --quick --device cpu            # the same path on a tiny shape (tests)

The step is the trainer's own (``bloomtrain.train.build_trainer``: DeepSpeed's pipeline engine, ZeRO-1 and the
BF16 optimizer, fused kernels ``auto``) on the preset's recipe (``configs/train/<preset>.yaml``: its dropout,
init and optimizer; sequence 2048) with synthetic tokens, one process, ``--iters`` timed iterations after
``--warmup``. The figures are the trainer's metrics (``bloomtrain.metrics``), medians over the timed iterations:

- ``megatron_tflops``: Megatron-DeepSpeed's logged TFLOPs, ``24 f B s l h^2 (1 + s/(6h) + V/(16 l h))`` FLOPs
  per iteration per second per device, ``f = 4`` with activation checkpointing (the recomputed forward
  counted), 3 without: BLOOM-176B's "150 TFLOPs" are this number;
- ``model_tflops``: the same with ``f = 3`` always (recomputation not counted), and ``mfu`` = model_tflops /
  the device's dense bf16 peak (``bloomtrain.metrics.device_peak_tflops``; none on a CPU).
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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", default="bloom-560m", help="configs/train/<preset>.yaml (the shape and its recipe)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--mbs", type=int, default=4, help="micro-batch size")
    p.add_argument("--gbs", type=int, default=16, help="global batch size (gradient accumulation over micro-batches)")
    p.add_argument("--activation-checkpointing", action=argparse.BooleanOptionalAction, default=True,
                   help="recompute each block in backward (BLOOM-176B's setting; default on)")
    p.add_argument("--iters", type=int, default=8, help="timed iterations")
    p.add_argument("--warmup", type=int, default=3, help="untimed iterations first")
    p.add_argument("--quick", action="store_true", help="a tiny shape (2 layers, hidden 64, seq 64): the path only")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    return p


def overrides(a: argparse.Namespace, log_dir: str) -> list[str]:
    iters = a.warmup + a.iters
    out = [f"optim.precision={a.precision}", f"parallel.activation_checkpointing={str(a.activation_checkpointing).lower()}",
           f"schedule.micro_batch_size={a.mbs}", f"schedule.global_batch_size={a.gbs}", "schedule.rampup_batch_size=null",
           "schedule.train_samples=null", f"schedule.train_iters={iters}", "schedule.warmup_samples=0",
           f"schedule.decay_samples={iters * a.gbs}", "data.kind=synthetic", "data.blend=null", f"data.synthetic_samples={iters * a.gbs}",
           "checkpoint.dir=null", "checkpoint.exit_duration_in_mins=null", f"logging.dir={log_dir}",
           "logging.tensorboard=false", "logging.eval_interval=null"]
    if a.quick:
        out += ["model.num_layers=2", "model.hidden_size=64", "model.num_heads=4", "model.seq_length=64",
                "model.vocab_size=512", "model.pad_vocab_size_to=512"]
    return out


def measure(a: argparse.Namespace) -> dict:
    import os

    if a.device == "cpu":
        os.environ["DS_ACCELERATOR"] = "cpu"
    from bloomtrain.config import load_config
    from bloomtrain.metrics import device_peak_tflops, flops_per_iteration, read_precision
    from bloomtrain.train import build_trainer

    with tempfile.TemporaryDirectory() as log_dir:
        cfg = load_config(ROOT / "configs" / "train" / f"{a.preset}.yaml", overrides(a, log_dir))
        build_trainer(cfg).fit()  # closes metrics.jsonl at the end
        metrics = Path(log_dir) / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        precision = read_precision(metrics)
    steps = [r for r in rows if "step_time_s" in r][a.warmup:]
    if not steps:
        raise SystemExit(f"bench_mfu: no timed iteration (--iters {a.iters}, --warmup {a.warmup})")
    m, tp = cfg.model, cfg.parallel.tp

    def median(key: str) -> float | None:
        values = [r[key] for r in steps if key in r]
        return statistics.median(values) if values else None

    return {
        "preset": a.preset, "device": a.device, "device_name": _device_name(a.device),
        "precision": precision.ran if precision else cfg.optim.precision,
        "precision_why": precision.why if precision else None,
        "shape": {"layers": m.num_layers, "hidden": m.hidden_size, "heads": m.num_heads, "seq": m.seq_length,
                  "vocab_padded": m.padded_vocab_size(tp)},
        "activation_checkpointing": a.activation_checkpointing, "micro_batch": a.mbs, "global_batch": a.gbs,
        "timed_iterations": len(steps), "kernels": m.kernels,
        "flops_per_iteration": {"model": flops_per_iteration(m, a.gbs, tp, False),
                                "megatron": flops_per_iteration(m, a.gbs, tp, a.activation_checkpointing)},
        "step_time_s": median("step_time_s"), "tokens_per_s": median("tokens_per_s"),
        "model_tflops": median("tflops"), "megatron_tflops": median("hw_tflops"), "mfu": median("mfu"),
        "peak_tflops": device_peak_tflops(cfg.logging.peak_tflops),
        "memory_gib": median("memory_gib"),
    }


def _device_name(device: str) -> str:
    import torch

    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


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
    mfu = f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "n/a (no peak for this device)"
    print(f"{r['preset']} on {r['device_name']} ({r['precision']}), layers {r['shape']['layers']} hidden "
          f"{r['shape']['hidden']} seq {r['shape']['seq']}, micro-batch {r['micro_batch']} x "
          f"{r['global_batch'] // r['micro_batch']}, activation checkpointing "
          f"{'on' if r['activation_checkpointing'] else 'off'}: step {r['step_time_s']:.3f} s, "
          f"{r['tokens_per_s']:,.0f} tokens/s, Megatron TFLOP/s per device {r['megatron_tflops']:.2f}, "
          f"model TFLOP/s {r['model_tflops']:.2f}, MFU {mfu}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
