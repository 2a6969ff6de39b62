"""`bloomdata train-tokenizer`: train a BLOOM-style byte-level BPE tokenizer on an alpha-weighted sample.

Flags are generated from ``TokenizerTrainConfig`` (the model the Prefect flows use too); ``--config YAML``
holds the same model, and flags given with it go on top. Inputs are ``--input [LANG=]PATH`` (repeatable;
without ``LANG=`` each row's ``lang`` field names its language).

    bloomdata train-tokenizer --input ../shared/corpus --out tok --vocab-size 32000 --byte-budget 50MB
    bloomdata train-tokenizer --input en=data/en/*.jsonl.zst --input fr=data/fr --out tok
    bloomdata train-tokenizer --input roots/ --out tok --byte-budget 5GB --max-memory 2GB --workers 2
        (past one machine's memory: words counted in parallel and spilled, the same merges learned from them)
    bloomdata train-tokenizer --config my-tokenizer.yaml   (a TokenizerTrainConfig in YAML)
"""

from __future__ import annotations

from bloomdata.cli.options import ConfigParser
from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer


def parser() -> ConfigParser[TokenizerTrainConfig]:
    return ConfigParser(TokenizerTrainConfig, "bloomdata train-tokenizer", __doc__)


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    report = train_tokenizer(config)
    print(f"wrote {config.out_dir}: vocab {report.vocab_size:,} trained on "
          f"{report.total_bytes_drawn / 1e6:.2f} MB from {len(report.languages)} languages "
          f"(alpha {config.alpha}, seed {config.seed}) in {report.wall_seconds:.1f} s; "
          f"identity {(report.tokenizer_identity or '')[:12]}")
    return 0
