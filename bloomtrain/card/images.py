"""The images a model card shows, written into the card's folder (atomic, via bloomdata.durable; PNG metadata
without the matplotlib version, so the same records give the same bytes):

- ``languages.png``: each language's share of the training blend's samples (a pie, as BLOOM's card shows it);
- ``validation_curves.png``: the validation loss during training and, when the run validated per language, each
  language's bits per byte (its loss where no bits per byte was logged) at every evaluation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bloomdata import durable
from bloomdata.blend.spec import BlendSpec
from bloomtrain.metrics import set_curves

LANGUAGES_PNG = "languages.png"
CURVES_PNG = "validation_curves.png"


def _pyplot():
    import matplotlib  # noqa: PLC0415 - only the card pays for matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _save(fig, path: Path) -> Path:
    durable.write_with(path, lambda f: fig.savefig(f, format="png", dpi=100, metadata={"Software": None}))
    _pyplot().close(fig)
    return path


def languages_pie(blend: BlendSpec, out_dir: Path) -> Path:
    """The blend's share of samples per dataset (language), largest first, shares under 2% unlabelled."""
    plt = _pyplot()
    datasets = sorted(blend.datasets, key=lambda d: -d.weight)
    fig, ax = plt.subplots(figsize=(5.5, 5.5))
    ax.pie([d.weight for d in datasets], labels=[d.name if d.weight >= 0.02 else "" for d in datasets],
           autopct=lambda pct: f"{pct:.1f}%" if pct >= 2 else "", startangle=90, counterclock=False,
           wedgeprops={"linewidth": 0.5, "edgecolor": "white"})
    ax.set_title("Share of the training blend's samples")
    fig.tight_layout()
    return _save(fig, Path(out_dir) / LANGUAGES_PNG)


def validation_curves(evals: list[dict[str, Any]], out_dir: Path) -> Path | None:
    """Validation loss per evaluation (left) and each named set's bits per byte (right, when logged); None when
    the run never validated."""
    overall = [r for r in evals if "valid_loss" in r]
    curves = set_curves(evals)
    if not overall and not curves:
        return None
    plt = _pyplot()
    panels = [p for p in ("overall", "sets") if (p == "overall" and overall) or (p == "sets" and curves)]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 3.8), squeeze=False)
    for ax, panel in zip(axes[0], panels, strict=True):
        if panel == "overall":
            ax.plot([r["iteration"] for r in overall], [r["valid_loss"] for r in overall], "o-")
            ax.set_ylabel("validation loss (nats/token)")
        else:
            bpb = all(p.bpb is not None for points in curves.values() for p in points)
            for name, points in sorted(curves.items()):
                ax.plot([p.iteration for p in points], [p.bpb if bpb else p.loss for p in points], "o-", label=name)
            ax.set_ylabel("bits per byte" if bpb else "loss (nats/token)")
            ax.legend(fontsize=7, ncol=2 if len(curves) > 6 else 1)
            ax.set_title("per language", fontsize=10)
        ax.set_xlabel("iteration")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save(fig, Path(out_dir) / CURVES_PNG)
