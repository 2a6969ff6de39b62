"""End-to-end data demo (what `make demo` runs): train a tokenizer, build per-language Megatron datasets.

    python -m bloomdata.cli.demo --out demo_out [--corpus DIR] [--vocab-size 8000] [--workers 2]

1. Trains a BLOOM-style byte-level BPE tokenizer on the corpus (default ../shared/corpus beside the
   repository: 27 languages) with the library's ``train_tokenizer`` -> ``OUT/tokenizer/``. The vocabulary
   is small (8,000) so this takes seconds, and it gives uint16 datasets, as any vocabulary < 65,500 does.
2. Builds one dataset per language with ``run_build`` on a LocalCluster of 2 Dask worker processes, with
   ``</s>`` appended to every document -> ``OUT/data/<lang>.bin/.idx`` plus ``build_summary.json``.
3. Ends by printing the build summary.

Reruns are cheap: the tokenizer is kept when its directory exists, and an unchanged build is a no-op.
The ``__main__`` guard matters: Dask's spawned workers re-import the main module.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from bloomdata.errors import BloomstackError


def default_corpus() -> Path:
    """../shared/corpus beside the repository (or $BLOOMSTACK_SHARED_CORPUS)."""
    env = os.environ.get("BLOOMSTACK_SHARED_CORPUS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "corpus"


def run_demo(out: Path, corpus: Path, vocab_size: int = 8000, workers: int = 2,
             progress: bool = True) -> dict:
    from bloomdata.build import BuildConfig, run_build
    from bloomdata.readers import SourceConfig
    from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer

    if not corpus.is_dir() or not any(corpus.glob("*.jsonl")):
        raise BloomstackError(f"corpus not found: {corpus} holds no .jsonl files (pass --corpus DIR)")
    sources = [SourceConfig(paths=[str(corpus)])]
    tok_dir = out / "tokenizer"
    t0 = time.perf_counter()
    if not (tok_dir / "tokenizer.json").is_file():
        print(f"[1/2] training a {vocab_size:,}-token tokenizer on {corpus} ...", file=sys.stderr)
        report = train_tokenizer(TokenizerTrainConfig(sources=sources, out_dir=str(tok_dir), vocab_size=vocab_size,
                                                      byte_budget=50_000_000, show_progress=progress))
        print(f"      {report['vocab_size']:,} tokens, {report['total_bytes_drawn'] / 1e6:.1f} MB of text, "
              f"{time.perf_counter() - t0:.1f} s -> {tok_dir}", file=sys.stderr)
    else:
        print(f"[1/2] reusing the tokenizer in {tok_dir}", file=sys.stderr)
    print(f"[2/2] building per-language datasets with {workers} Dask workers ...", file=sys.stderr)
    return run_build(BuildConfig(sources=sources, tokenizer=str(tok_dir), out_dir=str(out / "data"),
                                 append_eod=True, workers=workers, progress=progress))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bloomdata.cli.demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="output directory (tokenizer/ and data/ inside)")
    p.add_argument("--corpus", help="directory of .jsonl files (default: ../shared/corpus)")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--no-progress", dest="progress", action="store_false")
    args = p.parse_args(argv)
    from bloomdata.cli.build import format_summary

    try:
        summary = run_demo(Path(args.out), Path(args.corpus) if args.corpus else default_corpus(),
                           args.vocab_size, args.workers, args.progress)
    except BloomstackError as exc:
        print(f"bloomdata demo: error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
