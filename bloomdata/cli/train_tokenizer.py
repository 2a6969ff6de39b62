"""`bloomdata train-tokenizer`: train a BLOOM-style byte-level BPE tokenizer on an alpha-weighted sample.

Inputs come either from ``--input [LANG=]PATH`` (repeatable; without ``LANG=`` each row's ``lang`` field
names its language) or from ``--config YAML`` holding a ``TokenizerTrainConfig`` (the same model the
Prefect flows use). Flags given on the command line override the YAML.

    bloomdata train-tokenizer --input ../shared/corpus --out tok --vocab-size 32000 --byte-budget 50MB
    bloomdata train-tokenizer --input en=data/en/*.jsonl.zst --input fr=data/fr --out tok
    bloomdata train-tokenizer --config configs/data/tokenizer.yaml
"""

from __future__ import annotations

import argparse
import re

from bloomdata.config import load_yaml, validate
from bloomdata.errors import BloomstackError
from bloomdata.readers import source_from_spec
from bloomdata.tokenizer.bpe import BLOOM_VOCAB_SIZE, TokenizerTrainConfig, train_tokenizer

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(value: str) -> int:
    """'500MB' -> 500_000_000 (decimal units; KiB/MiB/GiB are binary)."""
    match = re.fullmatch(r"\s*([0-9_.]+)\s*([a-zA-Z]*)\s*", value)
    if not match or match.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(f"not a byte size: {value!r} (examples: 5000000, 50MB, 1GiB)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def add_input_arguments(parser: argparse.ArgumentParser) -> None:
    """The input options shared with `bloomdata fertility`."""
    parser.add_argument("--input", action="append", default=[], metavar="[LANG=]PATH",
                        help="file, directory or glob (repeatable); LANG= sets the language of every "
                             "document, else each row's lang field is used")
    parser.add_argument("--config", metavar="YAML", help="a config file with a `sources:` list (and more)")
    parser.add_argument("--text-field", default="text", help="row field holding the text (default: text)")
    parser.add_argument("--lang-field", default="lang", help="row field holding the language (default: lang)")
    parser.add_argument("--format", default="auto", choices=["auto", "jsonl", "parquet", "arrow", "hf", "txt"])


def input_sources(args: argparse.Namespace) -> list[dict]:
    return [source_from_spec(spec, args.text_field, args.format, args.lang_field).model_dump()
            for spec in args.input]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bloomdata train-tokenizer", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_arguments(parser)
    parser.add_argument("--out", help="output directory (tokenizer.json, tokenizer_config.json, ...)")
    parser.add_argument("--vocab-size", type=int, help=f"tokens incl. specials (default {BLOOM_VOCAB_SIZE})")
    parser.add_argument("--alpha", type=float, help="language sampling exponent, p ∝ bytes**alpha (0.3)")
    parser.add_argument("--byte-budget", type=parse_bytes, help="text to train on, e.g. 100MB (default)")
    parser.add_argument("--seed", type=int, help="sampling seed (default 0)")
    parser.add_argument("--min-frequency", type=int, help="minimum pair count to merge (default 2)")
    parser.add_argument("--allow-large-budget", action="store_true",
                        help="allow budgets over 500MB (the trainer needs ~30x the text in RAM)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    return parser


def config_from_args(args: argparse.Namespace) -> TokenizerTrainConfig:
    data = load_yaml(args.config) if args.config else {}
    if args.input:
        data["sources"] = input_sources(args)
    if not data.get("sources"):
        raise BloomstackError("no inputs: give --input [LANG=]PATH (repeatable) or --config YAML with sources")
    overrides = {"out_dir": args.out, "vocab_size": args.vocab_size, "alpha": args.alpha,
                 "byte_budget": args.byte_budget, "seed": args.seed, "min_frequency": args.min_frequency}
    data.update({k: v for k, v in overrides.items() if v is not None})
    if args.allow_large_budget:
        data["allow_large_budget"] = True
    if args.quiet:
        data["show_progress"] = False
    if not data.get("out_dir"):
        raise BloomstackError("no output directory: pass --out DIR (or set out_dir in the config)")
    return validate(TokenizerTrainConfig, data, args.config or "train-tokenizer")


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    config = config_from_args(args)
    report = train_tokenizer(config)
    print(f"wrote {config.out_dir}: vocab {report['vocab_size']:,} trained on "
          f"{report['total_bytes_drawn'] / 1e6:.2f} MB from {len(report['languages'])} languages "
          f"(alpha {config.alpha}, seed {config.seed}) in {report['wall_seconds']:.1f} s; "
          f"identity {report['tokenizer_identity'][:12]}")
    return 0
