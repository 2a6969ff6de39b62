"""Per-language validation in training (``data.valid_sets``) against the bare forward passes it runs.

Builds the trainer (``bloomtrain.train.build_trainer``, one process) on per-language datasets written from
tests/data/corpus with a tokenizer trained on the same text, one named validation set per language. Then,
alternating, for every set:

- ``valid set``: ``ValidSetCallback.evaluate``, everything one evaluation of a set costs in training: the
  fixed samples read from the datasets (memory-mapped), collated and padded, DeepSpeed's ``eval_batch`` over
  them, the exact float64 sums and their reductions;
- ``forward``: ``engine.eval_batch`` over the same micro-batches, collated once beforehand, with DeepSpeed's
  default averaging: the forward passes alone;
- ``reading``: only reading, collating and padding the samples (the host part of ``valid set``).

Reports the median seconds per evaluation of all sets and the ratio (goal: ~1.0, the evaluation adds no work
but reading its samples). Bytes per set are counted once, before training (``pre_train``), so not here.

    python benchmarks/bench_valid_sets.py                     # 4 languages, 64 samples each, CPU
    python benchmarks/bench_valid_sets.py --layers 2 --hidden 128 --seq 64 --samples 16 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from bloomdata.megatron.indexed import IndexedDatasetWriter
from bloomdata.tokenizer.bpe import eod_id, save_tokenizer, train_from_texts

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "corpus"


def write_data(root: Path, langs: list[str], vocab: int) -> tuple[Path, dict[str, Path]]:
    texts = {lang: [json.loads(line)["text"] for line in (CORPUS / f"{lang}.jsonl").read_text().splitlines()]
             for lang in langs}
    tok = train_from_texts([t for lang in langs for t in texts[lang]], vocab_size=vocab, min_frequency=2)
    tok_dir = save_tokenizer(tok, root / "tokenizer")
    prefixes = {}
    for lang in langs:
        prefixes[lang] = root / lang
        with IndexedDatasetWriter(prefixes[lang], dtype=np.uint16) as w:
            for text in texts[lang]:
                w.add_document(tok.encode(text, add_special_tokens=False).ids + [eod_id(tok)])
    return tok_dir, prefixes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--langs", default="en,fr,sw,zh")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--vocab", type=int, default=1000, help="tokenizer vocabulary (the model pads to 1024)")
    p.add_argument("--samples", type=int, default=64, help="samples per set and evaluation")
    p.add_argument("--mbs", type=int, default=4, help="micro-batch size")
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from bloomtrain.callbacks import ValidSetCallback  # noqa: PLC0415
    from bloomtrain.config import load_config  # noqa: PLC0415
    from bloomtrain.data import eval_micro_batches  # noqa: PLC0415
    from bloomtrain.train import build_trainer  # noqa: PLC0415

    torch.manual_seed(0)
    langs = args.langs.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        tok_dir, prefixes = write_data(root, langs, args.vocab)
        sets = "{" + ", ".join(f"{lang}: {{path: {prefix}, split: '0:1', samples: {args.samples}}}"
                               for lang, prefix in prefixes.items()) + "}"
        padded = -(-args.vocab // 128) * 128
        cfg = load_config(None, [
            f"model={{preset: tiny, num_layers: {args.layers}, hidden_size: {args.hidden}, num_heads: {args.heads}, "
            f"seq_length: {args.seq}, vocab_size: {args.vocab}, pad_vocab_size_to: {padded}}}",
            "optim.precision=fp32", f"schedule.micro_batch_size={args.mbs}",
            f"schedule.global_batch_size={args.mbs}", "schedule.train_iters=1", f"schedule.decay_samples={args.mbs}",
            "logging.eval_interval=1",
            f"data.valid_sets={sets}", f"data.tokenizer={tok_dir}", f"data.cache_dir={root / 'cache'}",
        ])
        trainer = build_trainer(cfg)
        callbacks = [cb for cb in trainer.callbacks if isinstance(cb, ValidSetCallback) and not cb.overall]
        engine, state = trainer.module.engine, trainer.state
        prebuilt = {}
        for cb in callbacks:
            batches, n = eval_micro_batches(cb.samples, args.mbs, state.dp_rank, state.dp_size)
            prebuilt[cb.name] = (list(batches), n)

        def valid_sets() -> float:
            start = time.perf_counter()
            for cb in callbacks:
                cb.evaluate(trainer)
            return time.perf_counter() - start

        def reading() -> float:
            start = time.perf_counter()
            for cb in callbacks:
                list(eval_micro_batches(cb.samples, args.mbs, state.dp_rank, state.dp_size)[0])
            return time.perf_counter() - start

        def forward() -> float:
            start = time.perf_counter()
            for cb in callbacks:
                batches, n = prebuilt[cb.name]
                engine.eval_batch(iter(batches), num_micro_batches=n)
            return time.perf_counter() - start

        valid_sets(), forward()  # warm-up
        runs: dict[str, list[float]] = {"valid set": [], "forward": [], "reading": []}
        for _ in range(args.repeat):
            runs["valid set"].append(valid_sets())
            runs["forward"].append(forward())
            runs["reading"].append(reading())
    tokens = sum(len(cb.samples) for cb in callbacks) * args.seq
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"{len(callbacks)} sets x {args.samples} samples x {args.seq} tokens ({tokens:,} tokens), model "
          f"{args.layers} layers x {args.hidden}, micro-batch {args.mbs}, {args.repeat} runs each, alternating")
    for name, t in med.items():
        print(f"  {name:10s} median {t * 1e3:8.1f} ms  ({tokens / t:,.0f} tokens/s)  runs "
              + " ".join(f"{x * 1e3:.0f}" for x in runs[name]))
    print(f"  ratio valid set / forward: {med['valid set'] / med['forward']:.3f}; reading the samples alone: "
          f"{med['reading'] / med['forward']:.3f} of the forward")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
