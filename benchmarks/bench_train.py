"""Training throughput: bloomtrain (DeepSpeed pipeline engine, 1 process) vs a plain PyTorch loop over
transformers' ``BloomForCausalLM`` with the same shape, data, batch and optimizer, side by side in one run.

    python benchmarks/bench_train.py --quick              # CPU, seconds
    python benchmarks/bench_train.py --layers 4 --hidden 512 --heads 8 --seq 512 --iters 10
    python benchmarks/bench_train.py --device cuda --precision bf16    # GPU part (only where CUDA exists)

The reference loop is what a user would write without us: AdamW (same betas, wd groups, lr), gradient
accumulation over the same micro-batches, clip_grad_norm_. Both sides run ``--warmup`` untimed iterations
first; tokens/s = global batch x seq / median step time. Ratio > 1 means bloomtrain is faster. On CPU the
engine's fixed per-step costs (schedule interpreter, gradient buffers) dominate tiny shapes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _overrides(a: argparse.Namespace, iters: int, log_dir: str) -> list[str]:
    return [
        "model.preset=tiny", f"model.num_layers={a.layers}", f"model.hidden_size={a.hidden}",
        f"model.num_heads={a.heads}", f"model.seq_length={a.seq}", f"model.vocab_size={a.vocab}",
        f"model.pad_vocab_size_to={a.vocab}", f"optim.precision={a.precision}", "optim.lr=1e-4",
        "optim.min_lr=1e-5", f"schedule.micro_batch_size={a.mbs}", f"schedule.global_batch_size={a.gbs}",
        f"schedule.train_iters={iters}", "schedule.warmup_samples=0", "schedule.decay_samples=1000000",
        "logging.eval_interval=null", f"logging.dir={log_dir}", "logging.tensorboard=false",
        f"data.synthetic_samples={iters * a.gbs}",
    ]


def bench_bloomtrain(a: argparse.Namespace) -> list[float]:
    from bloomtrain.config import load_config
    from bloomtrain.train import build_trainer

    with tempfile.TemporaryDirectory() as log_dir:
        cfg = load_config(ROOT / "configs" / "train" / "tiny-cpu.yaml", _overrides(a, a.warmup + a.iters, log_dir))
        build_trainer(cfg).fit()  # closes metrics.jsonl at the end
        records = [json.loads(line) for line in (Path(log_dir) / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step_time_s"] for r in records if "step_time_s" in r]  # skip the formula header
    return steps[a.warmup:]


def bench_reference(a: argparse.Namespace, device: str) -> list[float]:
    from transformers import BloomConfig, BloomForCausalLM

    from bloomtrain.data import SyntheticSamples, collate

    torch.manual_seed(0)
    model = BloomForCausalLM(BloomConfig(vocab_size=a.vocab, hidden_size=a.hidden, n_layer=a.layers,
                                         n_head=a.heads)).to(device).train()
    decay = [p for n, p in model.named_parameters() if p.ndim == 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    data = SyntheticSamples((a.warmup + a.iters) * a.gbs, a.seq + 1, a.vocab, 1234)
    times, consumed = [], 0
    for _ in range(a.warmup + a.iters):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for s in range(consumed, consumed + a.gbs, a.mbs):
            ids, (labels, _) = collate([data[i] for i in range(s, s + a.mbs)])
            ids, labels = ids.to(device), labels.to(device)
            with torch.autocast(device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                logits = model(input_ids=ids).logits
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten())
            (loss / (a.gbs // a.mbs)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
        consumed += a.gbs
    return times[a.warmup:]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny shapes, few iterations (CI smoke)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--mbs", type=int, default=2)
    p.add_argument("--gbs", type=int, default=8)
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="also write the figures to this file (benchmarks/gpu_check.py)")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.quick:
        a.layers, a.hidden, a.heads, a.seq, a.vocab, a.iters, a.warmup = 2, 96, 12, 64, 256, 4, 1
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.device == "cuda":
        # GPU part: runs only where CUDA exists (DeepSpeed then picks its CUDA accelerator and NCCL).
        if not torch.cuda.is_available():
            print("bench_train: --device cuda needs a GPU; none found", file=sys.stderr)
            return 2
    else:
        os.environ["DS_ACCELERATOR"] = "cpu"

    ref = bench_reference(a, a.device)
    ours = bench_bloomtrain(a)
    tokens = a.gbs * a.seq
    rows = [("plain PyTorch + transformers BloomForCausalLM (reference)", ref),
            ("bloomtrain (DeepSpeed pipeline engine)", ours)]
    print(f"shape: L={a.layers} h={a.hidden} heads={a.heads} seq={a.seq} vocab={a.vocab} | mbs {a.mbs} gbs {a.gbs} | "
          f"{a.precision} on {a.device}, {torch.get_num_threads()} threads, {a.iters} timed iterations")
    print(f"{'run':<60} {'median step s':>14} {'tokens/s':>10}")
    for name, times in rows:
        print(f"{name:<60} {statistics.median(times):>14.4f} {tokens / statistics.median(times):>10.0f}")
    ratio = statistics.median(ref) / statistics.median(ours)
    print(f"ratio bloomtrain / reference tokens/s: {ratio:.3f}")
    if a.json:
        figures = {"shape": {"layers": a.layers, "hidden": a.hidden, "heads": a.heads, "seq": a.seq, "vocab": a.vocab},
                   "mbs": a.mbs, "gbs": a.gbs, "precision": a.precision, "device": a.device,
                   "tokens_per_s": {name: tokens / statistics.median(times) for name, times in
                                    (("reference", ref), ("bloomtrain", ours))}, "ratio": ratio}
        Path(a.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
