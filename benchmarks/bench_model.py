"""Forward+backward tokens/s of our BloomModel against transformers' BloomForCausalLM, in one run.

Both models get the same config, the same weights (ours is loaded from the HF model), batch, dtype and
thread count; runs alternate (ours, HF, ours, HF, ...) so drift on a shared machine hits both, and the
median step time is reported. The ratio is ours / HF (goal >= 1.0x before fused kernels).

    python benchmarks/bench_model.py --quick                     # tiny shapes, CPU, seconds
    python benchmarks/bench_model.py --preset bloom-560m --layers 4 --seq 512 --batch 2
    python benchmarks/bench_model.py --device cuda --dtype bfloat16 --kernels fused   # GPU path (untested here)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from bloomtrain.checkpoint import format as fmt
from bloomtrain.hf_import import config_from_hf
from bloomtrain.model.bloom import BloomModel
from bloomtrain.model.config import PRESETS

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_pair(args):
    from transformers import BloomConfig, BloomForCausalLM  # noqa: PLC0415

    base = PRESETS[args.preset]()
    hf_config = BloomConfig(vocab_size=args.vocab or base.padded_vocab_size(), hidden_size=base.hidden_size,
                            n_layer=args.layers or base.num_layers, n_head=base.num_heads,
                            attn_implementation="eager")
    torch.manual_seed(0)
    hf = BloomForCausalLM(hf_config).to(device=args.device, dtype=_DTYPES[args.dtype]).train()
    config = config_from_hf(hf_config.to_dict()).model_copy(update={"kernels": args.kernels})
    ours = BloomModel(config, device="meta")
    states = fmt.from_hf_state_dict({k: v.detach().clone() for k, v in hf.state_dict().items()}, config.num_layers)
    fmt.load_model_layer_states(ours, states, assign=True)
    ours.train()
    return ours, hf


def step_ours(model, ids):
    # ids: [b, seq + 1]; forward over seq tokens, like step_hf; the trainer's fused head and loss.
    loss = model.train_loss(ids[:, :-1], ids[:, 1:])
    loss.backward()
    return loss


def token_batch(vocab: int, batch: int, seq: int, device: str) -> torch.Tensor:
    """[batch, seq + 1] ids drawn on the CPU from seed 0, then moved: the same batch on every device (a CPU
    generator cannot draw on CUDA)."""
    return torch.randint(0, vocab, (batch, seq + 1), generator=torch.Generator().manual_seed(0)).to(device)


def step_hf(model, ids):
    # ids: [b, seq]; labels=ids: HF shifts internally (loss over seq - 1 tokens, the same forward work).
    loss = model(ids, labels=ids).loss
    loss.backward()
    return loss


def timed(fn, model, ids, device) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one step; CPU time is steadier on a shared CPU machine."""
    model.zero_grad(set_to_none=True)
    if device == "cuda":  # GPU path: wait for queued kernels before and after
        torch.cuda.synchronize()
    start, cpu_start = time.perf_counter(), time.process_time()
    fn(model, ids)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, time.process_time() - cpu_start


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes for a smoke run")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="bloom-560m")
    parser.add_argument("--layers", type=int, default=4, help="override the preset's layer count (0: keep)")
    parser.add_argument("--vocab", type=int, default=0, help="override the vocab rows (0: the preset's)")
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5, help="timed steps per model (after one warm-up)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="float32")
    parser.add_argument("--kernels", default="torch", help="our kernel set: torch, fused, compile, apex")
    parser.add_argument("--json", default=None, help="also write the figures to this file (benchmarks/gpu_check.py)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.quick:
        # bloom-560m's width (h 1024, 16 heads) with 2 layers and a 4096-row vocab: seconds per run.
        args.preset, args.layers, args.vocab, args.seq, args.batch, args.iters = "bloom-560m", 2, 4096, 128, 2, 5
    torch.set_num_threads(args.threads)

    ours, hf = build_pair(args)
    vocab = hf.config.vocab_size
    ids = token_batch(vocab, args.batch, args.seq, args.device)
    with torch.no_grad():
        ours.eval(), hf.eval()
        diff = (ours(ids[:, :-1]).float() - hf(ids[:, :-1]).logits.float()).abs().max().item()
        ours.train(), hf.train()
    times = {"ours": [], "transformers": []}
    cpu = {"ours": [], "transformers": []}
    for i in range(args.iters + 1):  # iteration 0 is warm-up
        t_ours, c_ours = timed(step_ours, ours, ids, args.device)
        t_hf, c_hf = timed(step_hf, hf, ids[:, :-1], args.device)
        if i:
            times["ours"].append(t_ours)
            times["transformers"].append(t_hf)
            cpu["ours"].append(c_ours)
            cpu["transformers"].append(c_hf)
    tokens = args.batch * args.seq
    # min is the least disturbed run on a shared machine (timeit's advice); the median is shown too.
    best = {k: min(v) for k, v in times.items()}
    median = {k: statistics.median(v) for k, v in times.items()}
    print(f"config: {args.preset} layers={hf.config.n_layer} hidden={hf.config.hidden_size} "
          f"heads={hf.config.n_head} vocab={vocab} | batch {args.batch} x seq {args.seq} | "
          f"{args.dtype} on {args.device}, {args.threads} threads, kernels={args.kernels} | "
          f"forward+backward, {args.iters} steps each, alternating")
    print(f"logits max abs diff ours vs transformers: {diff:.2e}")
    for name in ("ours", "transformers"):
        print(f"  {name:<13} {tokens / best[name]:>10.1f} tokens/s (best)  {tokens / median[name]:>10.1f} (median)")
    print(f"  ratio ours/transformers: {best['transformers'] / best['ours']:.2f}x best, "
          f"{median['transformers'] / median['ours']:.2f}x median")
    if args.device == "cpu":
        print(f"  ratio by process CPU time (best): {min(cpu['transformers']) / min(cpu['ours']):.2f}x")
    if args.json:
        figures = {"preset": args.preset, "layers": hf.config.n_layer, "hidden": hf.config.hidden_size, "vocab": vocab,
                   "batch": args.batch, "seq": args.seq, "dtype": args.dtype, "device": args.device,
                   "kernels": args.kernels, "logits_max_abs_diff": diff,
                   "tokens_per_s": {k: tokens / v for k, v in best.items()},
                   "ratio_ours_over_transformers": best["transformers"] / best["ours"],
                   "ratio_median": median["transformers"] / median["ours"]}
        Path(args.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
