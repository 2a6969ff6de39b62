"""A tuned blend's files: blend.md (table), blend.json, blend.yaml (``BlendSpec``) and blend.png (chart), and
valid_sets.yaml (one validation set per dataset) when the blend has a validation split.

Written atomically through ``bloomdata.durable``, blend.yaml last: the trainer and the flows read only it,
so its presence means the other files are there too.

With evaluation reports (``bloomdata.blend.evaluation``: ``bloomdata blend --eval``), blend.md and blend.json
also hold each dataset's bits per byte (and, with two reports, the change) and blend.png a bits-per-byte
panel; blend.yaml is the same with or without them.

valid_sets.yaml is a plain ``NAME: PREFIX`` mapping, the value of the trainer's ``data.valid_sets`` (a
prefix's validation documents are those the training blend holds out), given as one override:
``"data.valid_sets=$(cat OUT/valid_sets.yaml)"`` (an override's value is parsed as YAML). tr11 did the same
with one ``valid_<language>`` group per dataset in its --valid-weighted-split-paths-path file.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from bloomdata import durable
from bloomdata.blend.spec import BlendDataset, BlendSpec

if TYPE_CHECKING:
    from bloomdata.blend.evaluation import BlendEvaluation


def _eval_columns(evaluation: BlendEvaluation | None) -> tuple[str, str]:
    """(header cells, alignment cells) the evaluation adds to the table."""
    if evaluation is None:
        return "", ""
    if evaluation.compares:
        return " bits per byte before | bits per byte after | change |", "---:|---:|---:|"
    return " bits per byte |", "---:|"


def _eval_cells(evaluation: BlendEvaluation | None, name: str | None) -> str:
    """The evaluation's cells of one row (``name`` None: the total row, which has none)."""
    if evaluation is None:
        return ""
    values = evaluation.bpb[name] if name is not None else [None] * len(evaluation.reports)
    cells = ["-" if v is None else f"{v:.4f}" for v in values]
    if evaluation.compares:
        change = evaluation.change(name) if name is not None else None
        cells.append("-" if change is None else f"{change:+.4f}")
    return " " + " | ".join(cells) + " |"


def _eval_note(evaluation: BlendEvaluation) -> list[str]:
    shown = [f"{m} in {p}" for p, m in zip(evaluation.reports, evaluation.models)]
    lines = ["", "Bits per byte on held-out text (lower is better): " + (
        f"{shown[0]} before, {shown[1]} after; change = after - before." if evaluation.compares else f"{shown[0]}.")]
    if evaluation.unmatched:
        lines.append(f"Evaluated but not in the blend: {', '.join(evaluation.unmatched)}.")
    return lines


def markdown_table(spec: BlendSpec, evaluation: BlendEvaluation | None = None) -> str:
    """The table per dataset (with each one's bits per byte when ``evaluation`` is given); for a mixture's blend,
    then how much of the mixture is there and what is not."""
    def count(n: int | None) -> str:
        return "-" if n is None else f"{n:,}"

    def epochs(e: float | None) -> str:
        return "-" if e is None else f"{e:.3f}"

    head, align = _eval_columns(evaluation)
    lines = ["| language | tokens | weight | tokens drawn | effective epochs |" + head,
             "|---|---:|---:|---:|---:|" + align]
    for d in spec.datasets:
        lines.append(f"| {d.name} | {count(d.tokens)} | {d.weight:.4%} | {count(d.tokens_drawn)} | {epochs(d.epochs)} |"
                     + _eval_cells(evaluation, d.name))
    total = sum(d.tokens or 0 for d in spec.datasets)
    budget = spec.token_budget
    lines.append(f"| **total** | {total:,} | 100% | {count(budget)} | {epochs(budget and budget / total)} |"
                 + _eval_cells(evaluation, None))
    if evaluation is not None:
        lines += _eval_note(evaluation)
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


def chart_png(spec: BlendSpec, max_epochs: float, evaluation: BlendEvaluation | None = None) -> bytes:
    """Natural vs blended share per language (top), effective epochs (with a budget) and bits per byte (with
    ``evaluation``: one bar per report) below, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [d.name for d in spec.datasets]
    total = sum(d.tokens or 0 for d in spec.datasets)
    with_epochs = spec.token_budget is not None  # without a budget there are no epochs to draw
    rows = 1 + with_epochs + (evaluation is not None)
    fig, axes = plt.subplots(rows, 1, figsize=(max(6.0, 0.45 * len(names) + 2), 0.5 + 3.0 * rows), sharex=True,
                             squeeze=False)
    top, bottom = axes[0][0], axes[-1][0]
    x = range(len(names))
    blend = f"blend ({spec.mixture})" if spec.mixture else f"blend (alpha={spec.alpha})"
    top.bar([i - 0.2 for i in x], [100 * (d.tokens or 0) / total for d in spec.datasets], 0.4, label="natural share")
    top.bar([i + 0.2 for i in x], [100 * d.weight for d in spec.datasets], 0.4, label=blend)
    top.set_ylabel("% of tokens")
    top.legend()
    if with_epochs:
        middle = axes[1][0]
        middle.bar(list(x), [d.epochs for d in spec.datasets], color="tab:green")
        middle.axhline(max_epochs, color="tab:red", linestyle="--", label=f"max epochs = {max_epochs:g}")
        middle.set_ylabel("effective epochs")
        middle.legend()
    if evaluation is not None:
        width = 0.8 / len(evaluation.reports)
        labels = ["before", "after"] if evaluation.compares else [evaluation.models[0]]
        for k, label in enumerate(labels):
            values = [evaluation.bpb[n][k] for n in names]
            bottom.bar([i - 0.4 + width * (k + 0.5) for i in x], [0.0 if v is None else v for v in values], width,
                       label=label)
        for i, n in enumerate(names):  # the change over the "after" bar
            if (change := evaluation.change(n)) is not None:
                bottom.annotate(f"{change:+.3f}", (i + 0.2, evaluation.latest(n)), ha="center", va="bottom",
                                fontsize=8)
        bottom.set_ylabel("bits per byte (lower is better)")
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


def blend_json(spec: BlendSpec, evaluation: BlendEvaluation | None = None) -> dict:
    """blend.json: the spec, with each dataset's bits per byte and the reports they come from when evaluated."""
    data = spec.model_dump(exclude_none=True)
    if evaluation is not None:
        for d in data["datasets"]:
            d.update(evaluation.dataset_fields(d["name"]))
        data["evaluation"] = evaluation.summary()
    return data


def write_blend(spec: BlendSpec, out_dir: str | Path, max_epochs: float,
                evaluation: BlendEvaluation | None = None) -> dict[str, Path]:
    """Write the files into ``out_dir``; returns their paths by kind (md, json, png, valid_sets, yaml)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / f"blend.{kind}" for kind in ("md", "json", "png")}
    blend_yaml = out / "blend.yaml"
    durable.write_text(paths["md"], markdown_table(spec, evaluation) + "\n")
    durable.write_json(paths["json"], blend_json(spec, evaluation), indent=2)
    durable.write_bytes(paths["png"], chart_png(spec, max_epochs, evaluation))
    if spec.has_valid:
        paths["valid_sets"] = out / "valid_sets.yaml"
        durable.write_text(paths["valid_sets"], valid_sets_yaml(spec, blend_yaml))
    durable.write_text(blend_yaml, spec.to_yaml())
    paths["yaml"] = blend_yaml
    return paths
