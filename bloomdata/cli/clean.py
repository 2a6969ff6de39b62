"""`bloomdata clean`: filter, deduplicate and redact corpora in parallel (Dask), before tokenization.

A thin command line over ``bloomdata.clean.run_clean``: its flags are generated from ``CleanConfig``
(``bloomdata.cli.options``), sections as dotted flags (``--near-dedup.bands 20``, ``--no-pii.enabled``,
``--quality.defaults.min-words 5``); ``--config YAML`` holds the same model (flags given with it go on top;
``--input`` replaces its sources); ``KEY=VALUE`` overrides go on top of both, values as YAML, e.g. per-language
thresholds ``quality.languages.zh.min_words=5`` or a check off ``quality.defaults.max_flagged=null``.

    bloomdata clean --input en=flows/demo_corpus/en.jsonl.gz --input flows/demo_corpus/ --out clean-all/ --workers 2
    bloomdata clean --preset roots --input oscar/ --out clean-roots/   # needs-data: BigScience's ROOTS filters
    bloomdata build --input clean-all/data --tokenizer tok/ --out data-clean/

writes ``clean-all/data/<lang>/*.jsonl.zst``, ``clean_summary.json``, ``removed.jsonl.zst`` (examples per
reason), ``clean.md`` and ``clean.png`` in ``clean-all/``, and prints the summary (``--dry-run``: the plan, with
nothing written). Errors on user input exit
with code 2 and one line (via the dispatcher).
"""

from __future__ import annotations

import json
import sys

from bloomdata.clean import PRESETS, CleanConfig, dry_run_clean, format_summary, run_clean
from bloomdata.cli.options import ConfigParser, Sources
from bloomdata.dry_run import print_plan


def parser() -> ConfigParser[CleanConfig]:
    p = ConfigParser(CleanConfig, "bloomdata clean", __doc__, nested=True,
                     sources=Sources(overrides=True, presets=PRESETS,
                                     override_example="quality.enabled=false near_dedup.bands=16",
                                     dry_run="inputs, shards, output files with an upper bound of their sizes, "
                                             "the peak disk space"))
    p.add_argument("--json", action="store_true", help="print the summary (with --dry-run: the plan) as JSON "
                                                       "instead of text")
    return p


def main(argv: list[str]) -> int:
    config, args = parser().parse(argv)
    if args.dry_run:
        print_plan("bloomdata clean", dry_run_clean(config), args.json)
        return 0
    summary = run_clean(config)
    print(json.dumps(summary.model_dump(mode="json"), indent=1) if args.json else format_summary(summary))
    return 0


if __name__ == "__main__":
    from bloomdata.cli import main as dispatch

    sys.exit(dispatch(["clean", *sys.argv[1:]]))
