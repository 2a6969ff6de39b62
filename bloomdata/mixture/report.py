"""A tuned blend's files: blend.md (table), blend.json, blend.yaml (``BlendSpec``) and blend.png (chart), and
valid_sets.yaml (one validation set per dataset) when the blend has a validation split.

Written atomically through ``bloomdata.durable``, blend.yaml last: the trainer and the flows read only it,
so its presence means the other files are there too.

valid_sets.yaml is a plain ``NAME: PREFIX`` mapping, the value of the trainer's ``data.valid_sets`` (a
prefix's validation documents are those the training blend holds out), given as one override:
``"data.valid_sets=$(cat OUT/valid_sets.yaml)"`` (an override's value is parsed as YAML). tr11 did the same
with one ``valid_<language>`` group per dataset in its --valid-weighted-split-paths-path file.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import yaml

from bloomdata import durable
from bloomdata.mixture.spec import BlendDataset, BlendSpec


def markdown_table(spec: BlendSpec) -> str:
    """The table per dataset; for a mixture's blend, then how much of the mixture is there and what is not."""
    def count(n: int | None) -> str:
        return "-" if n is None else f"{n:,}"

    def epochs(e: float | None) -> str:
        return "-" if e is None else f"{e:.3f}"

    lines = ["| language | tokens | weight | tokens drawn | effective epochs |", "|---|---:|---:|---:|---:|"]
    for d in spec.datasets:
        lines.append(f"| {d.name} | {count(d.tokens)} | {d.weight:.4%} | {count(d.tokens_drawn)} | {epochs(d.epochs)} |")
    total = sum(d.tokens for d in spec.datasets)
    budget = spec.token_budget
    lines.append(f"| **total** | {total:,} | 100% | {count(budget)} | {epochs(budget and budget / total)} |")
    if spec.mixture:
        lines += ["", f"Weights: the ratios of {spec.mixture} over the groups present "
                      f"({1 - math.fsum((spec.missing or {}).values()):.2%} of the mixture), renormalized to sum to 1."]
        if spec.missing:
            lines.append("Missing from the datasets (their mixture ratio): "
                         + ", ".join(f"{name} {100 * ratio:.3g}%" for name, ratio in spec.missing.items()) + ".")
        if spec.unmatched:
            lines.append(f"Left out (no group of the mixture): {', '.join(spec.unmatched)}.")
    return "\n".join(lines)


def over_repeated(spec: BlendSpec, max_epochs: float) -> list[BlendDataset]:
    """Datasets the blend repeats more than ``max_epochs`` times (an over-fitting risk)."""
    return [d for d in spec.datasets if d.epochs is not None and d.epochs > max_epochs]


def chart_png(spec: BlendSpec, max_epochs: float) -> bytes:
    """Natural vs blended share per language (top) and effective epochs (bottom), as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [d.name for d in spec.datasets]
    total = sum(d.tokens for d in spec.datasets)
    with_epochs = spec.token_budget is not None  # without a budget there are no epochs to draw
    fig, axes = plt.subplots(2 if with_epochs else 1, 1, figsize=(max(6.0, 0.45 * len(names) + 2),
                                                                  6.5 if with_epochs else 3.5), sharex=True,
                             squeeze=False)
    top, bottom = axes[0][0], axes[-1][0]
    x = range(len(names))
    blend = f"blend ({spec.mixture})" if spec.mixture else f"blend (alpha={spec.alpha})"
    top.bar([i - 0.2 for i in x], [100 * d.tokens / total for d in spec.datasets], 0.4, label="natural share")
    top.bar([i + 0.2 for i in x], [100 * d.weight for d in spec.datasets], 0.4, label=blend)
    top.set_ylabel("% of tokens")
    top.legend()
    if with_epochs:
        bottom.bar(list(x), [d.epochs for d in spec.datasets], color="tab:green")
        bottom.axhline(max_epochs, color="tab:red", linestyle="--", label=f"max epochs = {max_epochs:g}")
        bottom.set_ylabel("effective epochs")
        bottom.legend()
    bottom.set_xticks(list(x), names, rotation=60, ha="right")
    fig.suptitle(f"Blend for {spec.token_budget:,} tokens" if with_epochs else "Blend")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def valid_sets_yaml(spec: BlendSpec, blend_yaml: Path) -> str:
    """valid_sets.yaml: the blend's datasets as ``NAME: PREFIX``. Its comment holds no shell syntax (quotes,
    ``$``, backquotes), so the text can travel inside a quoted override, even through ``bloomtrain slurm``."""
    rng = spec.valid_range or f"the valid part of split {spec.split}"
    header = (f"# One validation set per dataset of {blend_yaml}, each read on its validation documents\n"
              f"# ({rng}), as tr11 validated on a valid_<language> group each. This is the value of the\n"
              "# trainer option data.valid_sets: pass this text as the override data.valid_sets=TEXT, with\n"
              "# data.tokenizer set to the tokenizer.json the datasets were built with (for bits per byte).\n")
    return header + yaml.safe_dump(spec.valid_sets(), sort_keys=False)


def write_blend(spec: BlendSpec, out_dir: str | Path, max_epochs: float) -> dict[str, Path]:
    """Write the files into ``out_dir``; returns their paths by kind (md, json, png, valid_sets, yaml)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / f"blend.{kind}" for kind in ("md", "json", "png")}
    blend_yaml = out / "blend.yaml"
    durable.write_text(paths["md"], markdown_table(spec) + "\n")
    durable.write_json(paths["json"], spec.model_dump(exclude_none=True), indent=2)
    durable.write_bytes(paths["png"], chart_png(spec, max_epochs))
    if spec.has_valid:
        paths["valid_sets"] = out / "valid_sets.yaml"
        durable.write_text(paths["valid_sets"], valid_sets_yaml(spec, blend_yaml))
    durable.write_text(blend_yaml, spec.to_yaml())
    paths["yaml"] = blend_yaml
    return paths
