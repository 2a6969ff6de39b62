"""`bloomdata fertility`: tokens per word and per character, per language (optionally beside a 2nd tokenizer).

Fertility is how BigScience chose BLOOM's vocabulary size (no language should lose more than 10 points
against a monolingual tokenizer). Words are whitespace-separated pieces (``str.split()``); for languages
written without spaces between words (zh, ja, th, ...) a "word" is a whole clause, so their per-word
figure is flagged ``whitespace_words=False`` and shown as n/a: compare them by tokens per character.

    bloomdata fertility --tokenizer tok --input ../shared/corpus [--compare other_tok] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bloomdata.errors import BloomstackError
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.bpe import load_tokenizer
from bloomdata.tokenizer.fertility import fertility_table, to_markdown


def main(argv: list[str]) -> int:
    from bloomdata.cli.train_tokenizer import add_input_arguments, input_sources, load_yaml, validate

    parser = argparse.ArgumentParser(prog="bloomdata fertility", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="tokenizer directory or tokenizer.json")
    parser.add_argument("--compare", metavar="DIR", help="a second tokenizer to show beside the first")
    add_input_arguments(parser)
    parser.add_argument("--max-docs", type=int, help="documents per language at most")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = parser.parse_args(argv)

    sources = input_sources(args) if args.input else load_yaml(args.config).get("sources") if args.config \
        else None
    if not sources:
        raise BloomstackError("no inputs: give --input [LANG=]PATH (repeatable) or --config YAML with sources")
    sources = [validate(SourceConfig, s, args.config or "--input") for s in sources]
    tok = load_tokenizer(args.tokenizer)
    other = load_tokenizer(args.compare) if args.compare else None
    rows = fertility_table(tok, sources, other, args.max_docs)
    name = Path(os.path.normpath(args.tokenizer)).name
    compare_name = Path(os.path.normpath(args.compare)).name if args.compare else None
    if compare_name == name:
        compare_name = f"{compare_name} (compare)"
    print(to_markdown(rows, name, compare_name))
    if args.json:
        payload = {"tokenizer": args.tokenizer, "compare": args.compare, "rows": [r.to_dict() for r in rows]}
        Path(args.json).write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0
