"""`bloomdata fertility`: tokens per word and per character, per language (optionally beside a 2nd tokenizer).

Fertility is how BigScience chose BLOOM's vocabulary size (no language should lose more than 10 points
against a monolingual tokenizer). Words are whitespace-separated pieces (``str.split()``); for languages
written without spaces between words (zh, ja, th, ...) a "word" is a whole clause, so their per-word
figure is flagged ``whitespace_words=False`` and shown as n/a: compare them by tokens per character.

    bloomdata fertility --tokenizer tok/ --input flows/demo_corpus/ --compare tok-demo/ --out fertility.json
    bloomdata fertility --tokenizer tok/ --input zh=flows/demo_corpus/zh.jsonl.gz --max-docs 50 --json
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import ConfigParser
from bloomdata.config_loader import cli_option
from bloomdata.readers import SourceConfig, sources_field
from bloomdata.tokenizer.encoder import ENCODER_HELP, EncoderKind, load_encoder
from bloomdata.tokenizer.fertility import fertility_record, fertility_table, to_markdown, write_fertility


class FertilityConfig(BaseModel):
    """What to measure: a tokenizer (and another beside it) on documents per language."""

    # ignore: --config may be a tokenizer training YAML, whose other keys (vocab_size...) do not concern this
    model_config = ConfigDict(extra="ignore")

    tokenizer: str = Field(description="tokenizer directory or tokenizer.json")
    compare: str | None = Field(default=None, description="a second tokenizer to show beside the first",
                                json_schema_extra=cli_option(metavar="DIR"))
    sources: list[SourceConfig] = sources_field(what="documents")
    max_docs: int | None = Field(default=None, ge=1, description="documents per language at most")
    encoder: EncoderKind = Field(default="auto", description=ENCODER_HELP)
    out: str | None = Field(default=None, description="also write the table as JSON to this file (what "
                            "`bloomtrain model-card --fertility` reads)", json_schema_extra=cli_option(metavar="FILE"))


def parser() -> ConfigParser[FertilityConfig]:
    p = ConfigParser(FertilityConfig, "bloomdata fertility", __doc__)
    p.add_argument("--json", action="store_true", help="print the table as JSON instead of Markdown")
    return p


def main(argv: list[str]) -> int:
    config, args = parser().parse(argv)
    tok = load_encoder(config.tokenizer, config.encoder)
    other = load_encoder(config.compare, config.encoder) if config.compare else None
    rows = fertility_table(tok, config.sources, other, config.max_docs)
    name = Path(os.path.normpath(config.tokenizer)).name
    compare_name = Path(os.path.normpath(config.compare)).name if config.compare else None
    if compare_name == name:
        compare_name = f"{compare_name} (compare)"
    if args.json:
        print(json.dumps(fertility_record(rows, config.tokenizer, config.compare), indent=1))
    else:
        print(to_markdown(rows, name, compare_name))
    if config.out:
        write_fertility(config.out, rows, config.tokenizer, config.compare)
    return 0
