"""`bloomtrain evaluate`'s scoring against a bare transformers forward loop over the same batches.

One randomly initialised BloomForCausalLM (a preset's shapes, fewer layers if asked) and one set of synthetic
documents (random token ids, lengths drawn around the context so that windows slide and rows are padded). The
windows and batches are the ones ``bloomtrain.evaluation.scoring`` builds; then, alternating runs:

- ``evaluate``: ``Scorer.score`` (collate, body forward, head + log-softmax on the scored positions only,
  per-window sums), exactly what ``bloomtrain evaluate`` runs per model;
- ``forward``: the bare loop ``model(input_ids, attention_mask).logits`` over the same (pre-collated) batches;
- ``forward+logsoftmax``: the same plus ``logits.float().log_softmax(-1)`` gathered at the scored positions
  (the plain reference computation).

Reports the median seconds per run, tokens/s and the ratios evaluate / loop (goal <= 1.10 against the bare
forward). ``--check`` also compares the NLL sums of ``evaluate`` and the reference loop.

    python benchmarks/bench_eval.py --quick                              # CPU, seconds
    python benchmarks/bench_eval.py --layers 2 --context 512 --docs 16   # CPU, bloom-560m widths
    python benchmarks/bench_eval.py --device cuda --dtype bfloat16 --layers 0 --context 2048 --docs 64 --batch 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bloomtrain.evaluation.scoring import Scorer, batches, collate, windows_for_documents
from bloomtrain.model.config import PRESETS

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_model(args):
    from transformers import BloomConfig, BloomForCausalLM  # noqa: PLC0415

    base = PRESETS[args.preset]()
    config = BloomConfig(vocab_size=args.vocab or base.padded_vocab_size(), hidden_size=args.hidden or base.hidden_size,
                         n_layer=args.layers or base.num_layers, n_head=base.num_heads)
    torch.manual_seed(0)
    return BloomForCausalLM(config).to(device=args.device, dtype=_DTYPES[args.dtype]).eval()


def documents(n: int, context: int, vocab: int, seed: int = 0) -> list[np.ndarray]:
    """Token ids of n documents, lengths log-normal around the context (a third longer than it)."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(context * 0.7), 0.8, n).astype(int), 8, 4 * context)
    return [rng.integers(4, vocab, size=int(k)) for k in lengths]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


@torch.no_grad()
def bare_loop(model, collated, device: str, logsoftmax: bool) -> float:
    """The bare forward loop over pre-collated batches; with ``logsoftmax``, also the reference NLL sum."""
    total = torch.zeros((), dtype=torch.float64, device=device)
    for batch in collated:
        ids = batch.input_ids.to(device, non_blocking=True)
        mask = None if batch.attention_mask is None else batch.attention_mask.to(device, non_blocking=True)
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        if logsoftmax:
            logp = logits.float().log_softmax(-1).view(-1, logits.shape[-1])
            positions = batch.positions.to(device, non_blocking=True)
            labels = batch.labels.to(device, non_blocking=True)
            total -= logp[positions].gather(1, labels[:, None]).sum().double()
    return float(total)


def timed(fn, device: str) -> tuple[float, object]:
    sync(device)
    start = time.perf_counter()
    out = fn()
    sync(device)
    return time.perf_counter() - start, out


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes for a smoke run")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="bloom-560m")
    parser.add_argument("--layers", type=int, default=2, help="override the preset's layer count (0: keep)")
    parser.add_argument("--hidden", type=int, default=0, help="override the hidden size (0: the preset's)")
    parser.add_argument("--vocab", type=int, default=0, help="override the vocab rows (0: the preset's)")
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--stride", type=int, default=0, help="0: context/2, as bloomtrain evaluate")
    parser.add_argument("--docs", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each (after one warm-up)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", choices=sorted(_DTYPES), default="float32")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--check", action="store_true", help="compare evaluate's NLL with the reference loop's")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--json-out", default=None, help="also write the JSON to this file (benchmarks/gpu_check.py)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.quick:
        args.layers, args.hidden, args.vocab, args.context, args.docs, args.batch = 2, 256, 32768, 128, 8, 4
    torch.set_num_threads(args.threads)

    model = build_model(args)
    vocab = model.config.vocab_size
    stride = args.stride or args.context // 2
    docs = documents(args.docs, args.context, vocab)
    windows = windows_for_documents(docs, 2, args.context, stride)
    order = batches(windows, args.batch)
    collated = [collate([windows[i] for i in index]) for index in order]
    scorer = Scorer(model)
    scored = sum(len(b.positions) for b in collated)
    forwarded = sum(b.input_ids.numel() for b in collated)

    runs = {
        "evaluate": lambda: float(scorer.score(windows, len(docs), batch_size=args.batch)[0].sum()),
        "forward": lambda: bare_loop(model, collated, args.device, logsoftmax=False),
        "forward+logsoftmax": lambda: bare_loop(model, collated, args.device, logsoftmax=True),
    }
    for fn in runs.values():  # warm-up (allocator, kernels)
        fn()
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    values: dict[str, object] = {}
    for _ in range(args.repeat):  # alternate, so drift on a shared machine hits every variant alike
        for name, fn in runs.items():
            t, values[name] = timed(fn, args.device)
            seconds[name].append(t)
    median = {name: statistics.median(ts) for name, ts in seconds.items()}
    result = {
        "device": args.device, "dtype": args.dtype, "threads": args.threads, "split_head": scorer.split_head,
        "shape": {"hidden": model.config.hidden_size, "layers": model.config.n_layer, "vocab": vocab},
        "context": args.context, "stride": stride, "docs": len(docs), "windows": len(windows), "batches": len(collated),
        "tokens_scored": scored, "tokens_forwarded": forwarded,
        "seconds": median, "tokens_per_s": {name: scored / s for name, s in median.items()},
        "ratio_vs_forward": median["evaluate"] / median["forward"],
        "ratio_vs_forward_logsoftmax": median["evaluate"] / median["forward+logsoftmax"],
    }
    if args.check:
        ours, reference = values["evaluate"], values["forward+logsoftmax"]
        result["nll_relative_difference"] = abs(ours - reference) / abs(reference)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    print(f"model: BLOOM hidden {result['shape']['hidden']}, {result['shape']['layers']} layers, vocab {vocab:,}; "
          f"{args.device} {args.dtype}, {args.threads} threads; head split from body: {scorer.split_head}")
    print(f"data: {len(docs)} documents -> {len(windows)} windows (context {args.context}, stride {stride}) in "
          f"{len(collated)} batches of {args.batch}; {scored:,} tokens scored of {forwarded:,} forwarded")
    for name, s in median.items():
        print(f"  {name:<20} {s:8.3f} s   {scored / s:10,.0f} scored tokens/s")
    print(f"evaluate / forward: {result['ratio_vs_forward']:.3f}x   evaluate / forward+logsoftmax: "
          f"{result['ratio_vs_forward_logsoftmax']:.3f}x   (goal: <= 1.10x the bare loop)")
    if args.check:
        print(f"NLL sum, evaluate vs the reference loop: relative difference {result['nll_relative_difference']:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
