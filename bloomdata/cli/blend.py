"""`bloomdata blend`: tune per-language blend weights for a token budget and write the blend files.

    bloomdata blend --dataset en=data/en --dataset fr=data/fr ... --budget 350e9 --alpha 0.3 --out blend/
    bloomdata blend --datasets-dir data/ --budget 1e9 --floor 0.002 --cap 0.25 --override en=0.2 --out blend/

Token counts come from each prefix's .idx (the train range only, when a split or range is given). Writes
OUT/blend.md and OUT/blend.json (table: language, tokens, weight, tokens drawn, effective epochs),
OUT/blend.png (weights and epochs per language) and OUT/blend.yaml (``BlendSpec``, read by the trainer
and the flows). Prints the table, and warns on stderr about languages repeated more than --max-epochs.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys

from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.megatron.splits import parse_range, range_to_documents, split_range
from bloomdata.mixture.weights import BlendDataset, BlendSpec, alpha_weights, constrain


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not value:
            raise BloomstackError(f"--{what} {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


def _floats(items: list[str], what: str) -> dict[str, float]:
    out = {}
    for name, value in _pairs(items, what).items():
        try:
            out[name] = float(value)
        except ValueError:
            raise BloomstackError(f"--{what} {name}={value}: {value!r} is not a number") from None
    return out


def _bound(values: list[str] | None, what: str) -> float | dict[str, float] | None:
    """--floor 0.01 (every dataset) or --floor en=0.05 --floor fr=0.02 (per dataset)."""
    if not values:
        return None
    if len(values) == 1 and "=" not in values[0]:
        try:
            return float(values[0])
        except ValueError:
            raise BloomstackError(f"--{what} {values[0]!r} is not a number") from None
    return _floats(values, what)


def _datasets(args) -> dict[str, str]:
    named = _pairs(args.dataset or [], "dataset")
    if args.datasets_dir:
        found = sorted(glob.glob(os.path.join(args.datasets_dir, "*.idx")))
        if not found:
            raise BloomstackError(f"--datasets-dir {args.datasets_dir}: no *.idx files there")
        for path in found:
            named.setdefault(os.path.basename(path)[: -len(".idx")], path[: -len(".idx")])
    if not named:
        raise BloomstackError("no datasets: give --dataset NAME=PREFIX (repeatable) or --datasets-dir DIR")
    return named


def _train_tokens(prefix: str, args) -> int:
    ds = IndexedDataset(prefix)
    if args.train_range:
        begin, end = range_to_documents(*parse_range(args.train_range), len(ds))
    elif args.split:
        begin, end = split_range(args.split, "train", len(ds), args.compat)
    else:
        begin, end = 0, len(ds)
    return int(ds.sizes[begin:end].sum(dtype="int64"))


def _parse_budget(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise BloomstackError(f"--budget {text!r}: expected a token count such as 350e9") from None
    if not math.isfinite(value) or value < 1:
        raise BloomstackError(f"--budget {text!r}: must be at least one token")
    return int(value)


def tune(args) -> BlendSpec:
    datasets = _datasets(args)
    tokens = {name: _train_tokens(prefix, args) for name, prefix in datasets.items()}
    base = alpha_weights(tokens, args.alpha)
    weights = constrain(base, _bound(args.floor, "floor"), _bound(args.cap, "cap"), _floats(args.override or [], "override"))
    budget = _parse_budget(args.budget)
    rows = []
    for name, prefix in datasets.items():
        w = weights[name]
        if w <= 0:
            continue  # an override of 0 drops the dataset from the blend
        drawn = int(round(w * budget))
        rows.append(BlendDataset(name=name, prefix=os.path.abspath(prefix), weight=w, tokens=tokens[name],
                                 tokens_drawn=drawn, epochs=drawn / tokens[name]))
    return BlendSpec(
        seq_length=args.seq_length, seed=args.seed, token_budget=budget, alpha=args.alpha, split=args.split,
        train_range=args.train_range, valid_range=args.valid_range, datasets=rows,
    )


def markdown_table(spec: BlendSpec) -> str:
    lines = ["| language | tokens | weight | tokens drawn | effective epochs |", "|---|---:|---:|---:|---:|"]
    for d in spec.datasets:
        lines.append(f"| {d.name} | {d.tokens:,} | {d.weight:.4%} | {d.tokens_drawn:,} | {d.epochs:.3f} |")
    total = sum(d.tokens for d in spec.datasets)
    lines.append(f"| **total** | {total:,} | 100% | {spec.token_budget:,} | {spec.token_budget / total:.3f} |")
    return "\n".join(lines)


def write_chart(spec: BlendSpec, path: str, max_epochs: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [d.name for d in spec.datasets]
    total = sum(d.tokens for d in spec.datasets)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6.0, 0.45 * len(names) + 2), 6.5), sharex=True)
    x = range(len(names))
    top.bar([i - 0.2 for i in x], [100 * d.tokens / total for d in spec.datasets], 0.4, label="natural share")
    top.bar([i + 0.2 for i in x], [100 * d.weight for d in spec.datasets], 0.4, label=f"blend (alpha={spec.alpha})")
    top.set_ylabel("% of tokens")
    top.legend()
    bottom.bar(list(x), [d.epochs for d in spec.datasets], color="tab:green")
    bottom.axhline(max_epochs, color="tab:red", linestyle="--", label=f"max epochs = {max_epochs:g}")
    bottom.set_ylabel("effective epochs")
    bottom.legend()
    bottom.set_xticks(list(x), names, rotation=60, ha="right")
    fig.suptitle(f"Blend for {spec.token_budget:,} tokens")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bloomdata blend", description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", action="append", metavar="NAME=PREFIX", help="a dataset prefix (repeatable)")
    p.add_argument("--datasets-dir", help="every PREFIX.idx in this directory, named after its file")
    p.add_argument("--budget", required=True, help="training tokens to draw, e.g. 350e9")
    p.add_argument("--alpha", type=float, default=0.3, help="p ∝ tokens**alpha (1: natural, 0: uniform)")
    p.add_argument("--floor", nargs="+", metavar="W|NAME=W", help="minimum weight, global or per dataset")
    p.add_argument("--cap", nargs="+", metavar="W|NAME=W", help="maximum weight, global or per dataset")
    p.add_argument("--override", action="append", metavar="NAME=W", help="fix a dataset's weight (repeatable)")
    p.add_argument("--max-epochs", type=float, default=4.0, help="warn above this many repeats (default 4)")
    p.add_argument("--seq-length", type=int, help="recorded in the YAML for the trainer")
    p.add_argument("--seed", type=int, help="recorded in the YAML for the trainer")
    p.add_argument("--split", help="'949,50,1'-style split recorded in the YAML (tokens counted on train)")
    p.add_argument("--train-range", help="BLOOM per-dataset train range, e.g. 0:0.95")
    p.add_argument("--valid-range", help="BLOOM per-dataset valid range, e.g. 0.95:1.0")
    p.add_argument("--compat", choices=["core", "bloom"], default="core", help="split arithmetic for --split")
    p.add_argument("--out", required=True, help="output directory for blend.{md,json,png,yaml}")
    return p


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.split and (args.train_range or args.valid_range):
        raise BloomstackError("give either --split or --train-range/--valid-range, not both")
    spec = tune(args)
    table = markdown_table(spec)
    print(table)
    for d in spec.datasets:
        if d.epochs > args.max_epochs:
            print(f"warning: {d.name} would be repeated {d.epochs:.2f} epochs (> --max-epochs {args.max_epochs:g}); "
                  "lower its weight (--cap/--override), raise --alpha towards natural proportions, or add data",
                  file=sys.stderr)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "blend.md"), "w", encoding="utf-8") as f:
        f.write(table + "\n")
    with open(os.path.join(args.out, "blend.json"), "w", encoding="utf-8") as f:
        json.dump(spec.model_dump(exclude_none=True), f, indent=2)
    with open(os.path.join(args.out, "blend.yaml"), "w", encoding="utf-8") as f:
        f.write(spec.to_yaml())
    write_chart(spec, os.path.join(args.out, "blend.png"), args.max_epochs)
    print(f"wrote {args.out}/blend.md, blend.json, blend.png, blend.yaml", file=sys.stderr)
    return 0
