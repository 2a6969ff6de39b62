"""A tuned blend's files: blend.md (table), blend.json, blend.yaml (``BlendSpec``) and blend.png (chart).

Written atomically through ``bloomdata.durable``, the YAML last: the trainer and the flows read only it,
so its presence means the other files are there too.
"""

from __future__ import annotations

import io
from pathlib import Path

from bloomdata import durable
from bloomdata.mixture.spec import BlendDataset, BlendSpec


def markdown_table(spec: BlendSpec) -> str:
    lines = ["| language | tokens | weight | tokens drawn | effective epochs |", "|---|---:|---:|---:|---:|"]
    for d in spec.datasets:
        lines.append(f"| {d.name} | {d.tokens:,} | {d.weight:.4%} | {d.tokens_drawn:,} | {d.epochs:.3f} |")
    total = sum(d.tokens for d in spec.datasets)
    lines.append(f"| **total** | {total:,} | 100% | {spec.token_budget:,} | {spec.token_budget / total:.3f} |")
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
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def write_blend(spec: BlendSpec, out_dir: str | Path, max_epochs: float) -> dict[str, Path]:
    """Write the four files into ``out_dir``; returns their paths by kind (md, json, png, yaml)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / f"blend.{kind}" for kind in ("md", "json", "png", "yaml")}
    durable.write_text(paths["md"], markdown_table(spec) + "\n")
    durable.write_json(paths["json"], spec.model_dump(exclude_none=True), indent=2)
    durable.write_bytes(paths["png"], chart_png(spec, max_epochs))
    durable.write_text(paths["yaml"], spec.to_yaml())
    return paths
