"""The plot and Markdown the flows publish for a training run (its numbers: ``bloomtrain.metrics``).

Prefect-free on purpose: the flows only hand the results to ``create_*_artifact``, and tests check the
text against a hand-written metrics file. The numbers come from ``bloomtrain.metrics.summarize`` over the
trainer's ``metrics.jsonl`` (its record of truth), read by ``bloomtrain.metrics.read_metrics``.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from bloomdata import durable
from bloomtrain.metrics import TrainingSummary, set_curves


def plot_loss(train: list[dict[str, Any]], evals: list[dict[str, Any]], png: str | Path) -> Path:
    """Training loss per iteration (and validation points) as a PNG; with named validation sets, a second
    panel on the right: each set's bits per byte (its loss where no bpb was logged) per evaluation."""
    import matplotlib  # noqa: PLC0415 - only the report pays for matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    curves = set_curves(evals)
    fig, axes = plt.subplots(1, 2 if curves else 1, figsize=(11 if curves else 6, 3.5), dpi=100, squeeze=False,
                             sharex=True)
    ax = axes[0][0]
    ax.plot([r["iteration"] for r in train], [r["loss"] for r in train], label="train loss")
    overall = [r for r in evals if "valid_loss" in r]
    if overall:
        ax.plot([r["iteration"] for r in overall], [r["valid_loss"] for r in overall], "o-", label="validation loss")
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    if curves:
        per_set = axes[0][1]
        bpb = all(p.bpb is not None for points in curves.values() for p in points)
        for name, points in sorted(curves.items()):
            per_set.plot([p.iteration for p in points], [p.bpb if bpb else p.loss for p in points], "o-",
                         label=name)
        per_set.set_xlabel("iteration")
        per_set.set_ylabel("bits per byte" if bpb else "loss (nats/token)")
        per_set.set_title("validation per set", fontsize=10)
        per_set.grid(alpha=0.3)
        per_set.legend(fontsize=7, ncol=2 if len(curves) > 6 else 1)
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    durable.write_with(png, lambda f: fig.savefig(f, format="png"))  # the artifact and the run dir show it whole
    plt.close(fig)
    return png


def png_markdown(png: str | Path, alt: str) -> str:
    """A Markdown image holding the PNG inline (base64), so an artifact shows it without a file server."""
    return f"![{alt}](data:image/png;base64,{base64.b64encode(Path(png).read_bytes()).decode()})"


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def training_markdown(summary: TrainingSummary | None, *, paths: dict[str, str], png: str | Path | None = None,
                      embed_png: bool = True) -> str:
    """The training summary artifact: headline numbers, where things are, and the loss curve."""
    s = summary
    mfu = s.mfu if s else None
    rows = [
        ("iterations", _fmt(s and s.iterations, "d")),
        ("final training loss", _fmt(s and s.final_loss, ".4f")),
        ("perplexity (exp loss)", _fmt(s and s.perplexity, ".2f")),
        ("validation loss / ppl", f"{_fmt(s and s.valid_loss, '.4f')} / {_fmt(s and s.valid_ppl, '.2f')}"),
        ("tokens/s (median, steady state)", _fmt(s and s.tokens_per_s, ",.0f")),
        ("TFLOP/s per device", _fmt(s and s.tflops, ".4f")),
        ("MFU", "n/a (no device peak known, e.g. CPU)" if mfu is None else f"{100 * mfu:.1f}%"),
    ]
    lines = ["# Training summary", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    sets = s.valid_sets if s else {}
    if sets:
        lines += ["", "## Validation per set (last evaluation)", "",
                  "| set | iteration | loss | ppl | bits per byte |", "|---|---|---|---|---|"]
        lines += [f"| {name} | {p.iteration:d} | {_fmt(p.loss, '.4f')} | {_fmt(p.ppl, '.2f')} | {_fmt(p.bpb, '.4f')} |"
                  for name, p in sets.items()]
    lines += ["", "| output | path |", "|---|---|"]
    lines += [f"| {k} | `{v}` |" for k, v in paths.items()]
    if png is not None and Path(png).exists():
        what = "Loss curve (right: each set's validation bits per byte)" if sets else "Loss curve"
        lines += ["", f"{what}: `{png}`", ""]
        if embed_png:  # inline, so the artifact shows the plot without a file server (~20 KB)
            lines.append(png_markdown(png, "loss curve"))
    return "\n".join(lines) + "\n"
