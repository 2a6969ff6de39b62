"""`bloomdata build`: tokenize corpora in parallel (Dask) into Megatron ``.bin/.idx`` datasets.

Thin argparse over ``bloomdata.build.run_build``. Either flags or ``--config YAML`` (a ``BuildConfig``);
flags given together with ``--config`` override the file's values (``--input`` replaces its sources).

    bloomdata build --input en=corpus/en.jsonl --input fr=corpus/fr.jsonl --tokenizer tok/ --out data/ \\
        --workers 2 --append-eod

writes ``data/en.bin/.idx``, ``data/fr.bin/.idx``, ``data/build_summary.json`` and ``data/rejects.jsonl``,
and prints the summary. Errors on user input exit with code 2 and one line (via the dispatcher).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from bloomdata.build import BuildConfig, run_build
from bloomdata.config import load_yaml, validate
from bloomdata.errors import BloomstackError
from bloomdata.readers import source_from_spec


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bloomdata build", description=__doc__.replace("``", ""),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    # every default is None so that only flags actually given override a --config file
    p.add_argument("--config", help="YAML file holding a BuildConfig (flags override it)")
    p.add_argument("--input", action="append", metavar="[LANG=]PATH",
                   help="input file, directory or glob; LANG= sets the language of all its documents "
                        "(else each row's 'lang' field). Repeatable")
    p.add_argument("--text-field", help="field holding the text (default: text)")
    p.add_argument("--tokenizer", help="tokenizer.json or a directory holding one")
    p.add_argument("--out", help="output directory")
    p.add_argument("--workers", type=int, help="local Dask worker processes (default 2; 0: in-process)")
    p.add_argument("--scheduler", metavar="ADDR", help="use an existing Dask cluster, e.g. tcp://host:8786")
    p.add_argument("--append-eod", action="store_true", default=None, help="append </s> to every document")
    p.add_argument("--strict", action="store_true", default=None, help="fail on the first rejected row")
    p.add_argument("--max-rows-per-shard", type=int, help="split files with more rows into row ranges")
    p.add_argument("--split-by", choices=["lang", "none"], help="one output per language (default) or one")
    p.add_argument("--output-name", help="output prefix name with --split-by none (default: all)")
    p.add_argument("--batch-docs", type=int, help="documents per encode_batch call (default 1000)")
    p.add_argument("--keep-shards", action="store_true", default=None, help="keep OUT/shards after merging")
    p.add_argument("--no-progress", dest="progress", action="store_false", default=None,
                   help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    return p


def config_from_args(args: argparse.Namespace) -> BuildConfig:
    """A BuildConfig from --config (if any) with the given flags on top."""
    values: dict[str, Any] = {}
    if args.config:
        values = load_yaml(args.config)
    if args.input:
        values["sources"] = [source_from_spec(spec, text_field=args.text_field or "text").model_dump()
                             for spec in args.input]
    flags = {"tokenizer": args.tokenizer, "out_dir": args.out, "workers": args.workers,
             "scheduler": args.scheduler, "append_eod": args.append_eod, "strict": args.strict,
             "max_rows_per_shard": args.max_rows_per_shard, "split_by": args.split_by,
             "output_name": args.output_name, "batch_docs": args.batch_docs, "keep_shards": args.keep_shards,
             "progress": args.progress}
    values.update({k: v for k, v in flags.items() if v is not None})
    for required, flag in (("sources", "--input"), ("tokenizer", "--tokenizer"), ("out_dir", "--out")):
        if required not in values:
            raise BloomstackError(f"missing {flag} (or {required} in --config)")
    return validate(BuildConfig, values, f"{args.config or 'bloomdata build'}: invalid build setting")


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def format_summary(s: dict[str, Any]) -> str:
    """The build summary as a short text table (the same facts as build_summary.json)."""
    lines = [f"build summary ({s['out_dir']}){'  [up to date: nothing to do]' if s.get('up_to_date') else ''}"]
    width = max([len(n) for n in s["outputs"]] + [6])
    lines.append(f"  {'output':<{width}} {'documents':>11} {'tokens':>14} {'bin':>12}")
    for name, o in s["outputs"].items():
        lines.append(f"  {name:<{width}} {o['documents']:>11,} {o['tokens']:>14,} {_mb(o['bin_bytes']):>12}")
    lines.append(f"  {'total':<{width}} {s['documents']:>11,} {s['tokens']:>14,} {_mb(s['bytes_out']):>12}")
    lines.append(f"  dtype {s['dtype']}, append_eod {s['append_eod']}, shards {s['shards']['total']} "
                 f"({s['shards']['built']} built, {s['shards']['reused']} reused)")
    lines.append(f"  bytes in: {_mb(s['text_bytes_in'])} of text ({_mb(s['input_file_bytes'])} of files); "
                 f"bytes out: {_mb(s['bytes_out'])}")
    rejected = {k: v for k, v in s["rejects"].items() if v}
    lines.append(f"  rejects: {s['rejects_total']:,}" + (f" {rejected} (examples: {s['rejects_file']})"
                                                          if rejected else ""))
    lines.append(f"  wall {s['wall_seconds']:.1f} s (tokenize {s['tokenize_seconds']:.1f} s, merge "
                 f"{s['merge_seconds']:.1f} s): {s['throughput_mb_s']:.2f} MB/s, {s['tokens_per_s']:,.0f} tokens/s")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    summary = run_build(config_from_args(args))
    if args.json:
        import json

        print(json.dumps(summary, indent=1))
    else:
        print(format_summary(summary))
    return 0


if __name__ == "__main__":
    from bloomdata.cli import main as dispatch

    sys.exit(dispatch(["build", *sys.argv[1:]]))
