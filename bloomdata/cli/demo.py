"""End-to-end data demo (what `make demo` runs): train a tokenizer, build per-language Megatron datasets.

    python -m bloomdata.cli.demo --out demo_out [--corpus DIR] [--vocab-size 8000] [--workers 2]

1. Trains a BLOOM-style byte-level BPE tokenizer on the corpus (default tests/data/corpus in the repository:
   27 languages, Leipzig Wortschatz sentences, its README.md gives the attribution) with the library's
   ``train_tokenizer`` -> ``OUT/tokenizer/``. The vocabulary is small (8,000) so this takes seconds, and it gives uint16
   datasets, as any vocabulary < 65,500 does.
2. Builds one dataset per language with ``run_build`` on a LocalCluster of 2 Dask worker processes, with
   ``</s>`` appended to every document -> ``OUT/data/<lang>.bin/.idx`` plus ``build_summary.json``.
3. Ends by printing the build summary.

Reruns are cheap: the tokenizer is kept when its directory exists, and an unchanged build is a no-op.
The ``__main__`` guard matters: Dask's spawned workers re-import the main module.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.config_loader import DASHBOARD, cli_option
from bloomdata.errors import BloomstackError

if TYPE_CHECKING:
    from bloomdata.build import BuildSummary


def default_corpus() -> Path:
    """tests/data/corpus in the repository (or $BLOOMSTACK_SHARED_CORPUS)."""
    env = os.environ.get("BLOOMSTACK_SHARED_CORPUS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "tests" / "data" / "corpus"


def run_demo(out: Path, corpus: Path, vocab_size: int = 8000, workers: int = 2,
             progress: bool = True, dashboard: bool = False) -> BuildSummary:
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
        print(f"      {report.vocab_size:,} tokens, {report.total_bytes_drawn / 1e6:.1f} MB of text, "
              f"{time.perf_counter() - t0:.1f} s -> {tok_dir}", file=sys.stderr)
    else:
        print(f"[1/2] reusing the tokenizer in {tok_dir}", file=sys.stderr)
    print(f"[2/2] building per-language datasets with {workers} Dask workers ...", file=sys.stderr)
    return run_build(BuildConfig(sources=sources, tokenizer=str(tok_dir), out_dir=str(out / "data"),
                                 append_eod=True, workers=workers, progress=progress, dashboard=dashboard))


class DemoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    out_dir: str = Field(description="output directory (tokenizer/ and data/ inside)",
                         json_schema_extra=cli_option("--out", metavar="DIR"))
    corpus: str | None = Field(default=None, description="directory of .jsonl files (default: tests/data/corpus)",
                               json_schema_extra=cli_option(metavar="DIR"))
    vocab_size: int = Field(default=8000, description="tokens in the demo tokenizer")
    workers: int = Field(default=2, ge=0, description="Dask LocalCluster worker processes")
    dashboard: bool = Field(default=False, description="the build: " + DASHBOARD)
    progress: bool = Field(default=True, description="progress bars on stderr")


def parser() -> ConfigParser[DemoConfig]:
    return ConfigParser(DemoConfig, "python -m bloomdata.cli.demo", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def main(argv: list[str] | None = None) -> int:
    from bloomdata.build import format_summary

    try:
        config, _ = parser().parse(sys.argv[1:] if argv is None else argv)
        summary = run_demo(Path(config.out_dir), Path(config.corpus) if config.corpus else default_corpus(),
                           config.vocab_size, config.workers, config.progress, config.dashboard)
    except BloomstackError as exc:
        print(f"bloomdata demo: error: {exc}", file=sys.stderr)
        return 2
    print(format_summary(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
