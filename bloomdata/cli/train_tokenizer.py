"""`bloomdata train-tokenizer`: train a BLOOM-style byte-level BPE tokenizer on an alpha-weighted sample.

Flags are generated from ``TokenizerTrainConfig`` (the model the Prefect flows use too); ``--config YAML``
holds the same model, and flags given with it go on top. Inputs are ``--input [LANG=]PATH`` (repeatable;
without ``LANG=`` each row's ``lang`` field names its language).

    bloomdata train-tokenizer --input flows/demo_corpus/ --out tok-demo --vocab-size 2000 --byte-budget 5MB
    bloomdata train-tokenizer --input en=clean/data/en/*.jsonl.zst --input fr=clean/data/fr --out tok-enfr \\
        --vocab-size 1000
    bloomdata train-tokenizer --input roots/ --out tok-roots --byte-budget 5GB --max-memory 2GB \\
        --workers 2   # needs-data
        (past one machine's memory: words counted in parallel and spilled, the same merges learned from them)
    bloomdata train-tokenizer --input flows/demo_corpus/ --out tok-yaml --vocab-size 1000 --print-config > tok.yaml
    bloomdata train-tokenizer --config tok.yaml   # a TokenizerTrainConfig in YAML: --print-config writes one
    bloomdata train-tokenizer --config tok.yaml --dry-run   # the sample per language and the files, nothing written
"""

from __future__ import annotations

from bloomdata.cli.options import ConfigParser, Sources
from bloomdata.dry_run import print_plan
from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer
from bloomdata.tokenizer.plan import plan_tokenizer

DRY_RUN = "inputs, text bytes and sample bytes per language, the trainer and its memory, the files it writes"


def parser() -> ConfigParser[TokenizerTrainConfig]:
    p = ConfigParser(TokenizerTrainConfig, "bloomdata train-tokenizer", __doc__, sources=Sources(dry_run=DRY_RUN))
    p.add_argument("--json", action="store_true", help="print the training report (with --dry-run: the plan) as "
                                                       "JSON instead of one line")
    return p


def main(argv: list[str]) -> int:
    config, args = parser().parse(argv)
    if args.dry_run:
        print_plan("bloomdata train-tokenizer", plan_tokenizer(config), args.json)
        return 0
    report = train_tokenizer(config)
    if args.json:
        print(report.model_dump_json(indent=1))
        return 0
    print(f"wrote {config.out_dir}: vocab {report.vocab_size:,} trained on "
          f"{report.total_bytes_drawn / 1e6:.2f} MB from {len(report.languages)} languages "
          f"(alpha {config.alpha}, seed {config.seed}) in {report.wall_seconds:.1f} s; "
          f"identity {(report.tokenizer_identity or '')[:12]}")
    return 0
