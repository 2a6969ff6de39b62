"""`bloomdata build`: tokenize corpora in parallel (Dask) into Megatron ``.bin/.idx`` datasets.

A thin command line over ``bloomdata.build.run_build``: its flags are generated from ``BuildConfig``
(``bloomdata.cli.options``), and ``--config YAML`` holds the same model (flags given with it go on top;
``--input`` replaces its sources).

    bloomdata build --input en=flows/demo_corpus/en.jsonl.gz --input fr=flows/demo_corpus/fr.jsonl.gz \\
        --tokenizer tok/ --out data-enfr/ --workers 2 --append-eod

writes ``data-enfr/en.bin/.idx``, ``data-enfr/fr.bin/.idx``, ``build_summary.json`` and ``rejects.jsonl`` there,
and prints the summary (``--dry-run``: the plan, with nothing written). Errors on user input exit with code 2
and one line (via the dispatcher).
"""

from __future__ import annotations

import json
import sys

from bloomdata.build import BuildConfig, dry_run_build, format_summary, run_build
from bloomdata.cli.options import ConfigParser, Sources
from bloomdata.dry_run import print_plan

DRY_RUN = "inputs, shards, output files and their sizes estimated from a sample"


def parser() -> ConfigParser[BuildConfig]:
    p = ConfigParser(BuildConfig, "bloomdata build", __doc__, sources=Sources(dry_run=DRY_RUN))
    p.add_argument("--json", action="store_true", help="print the summary (with --dry-run: the plan) as JSON "
                                                       "instead of text")
    return p


def main(argv: list[str]) -> int:
    config, args = parser().parse(argv)
    if args.dry_run:
        print_plan("bloomdata build", dry_run_build(config), args.json)
        return 0
    summary = run_build(config)
    print(json.dumps(summary.model_dump(mode="json"), indent=1) if args.json else format_summary(summary))
    return 0


if __name__ == "__main__":
    from bloomdata.cli import main as dispatch

    sys.exit(dispatch(["build", *sys.argv[1:]]))
