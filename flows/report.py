"""Turn a training run's ``metrics.jsonl`` into the numbers, plot and Markdown the flows publish.

Prefect-free on purpose: the flows only hand the results to ``create_*_artifact``, and tests check the
numbers against a hand-written metrics file. ``metrics.jsonl`` is the trainer's record of truth
(``bloomtrain.metrics``): one JSON object per logged iteration (``iteration, loss, tokens_per_s, tflops,
mfu`` when the device peak is known, ...), one per evaluation (``iteration, valid_loss, valid_ppl``) and one
per named validation set and evaluation (``iteration, valid/<name>/loss, valid/<name>/ppl,
valid/<name>/bpb``; ``data.valid_sets``, one per language in the pipeline). The evaluation records of one
iteration are merged into one. A resumed run appends to the same file, so later records for an iteration
replace earlier ones.
"""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any

from bloomdata import durable


def read_metrics(path: str | Path) -> tuple[list[dict], list[dict]]:
    """(training records, evaluation records), each sorted by iteration, last write wins; [] if absent.

    An iteration's evaluation record holds ``valid_loss``/``valid_ppl`` and every ``valid/<name>/*`` logged
    for it (the trainer writes one record per set)."""
    train: dict[int, dict] = {}
    evals: dict[int, dict] = {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return [], []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill: the rest of the file is still good
        if not isinstance(rec, dict) or "iteration" not in rec:
            continue
        if "valid_loss" in rec or any(k.startswith("valid/") for k in rec):
            evals.setdefault(rec["iteration"], {}).update(rec)
        elif "loss" in rec:
            train[rec["iteration"]] = rec
    return [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)]


def set_curves(evals: list[dict]) -> dict[str, list[dict[str, float]]]:
    """Per named validation set, its evaluations in iteration order: ``{"iteration", "loss", "ppl", "bpb"}``
    (a metric the record lacks is absent)."""
    curves: dict[str, list[dict[str, float]]] = {}
    for rec in evals:
        points: dict[str, dict[str, float]] = {}
        for key, value in rec.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "valid":
                points.setdefault(parts[1], {"iteration": rec["iteration"]})[parts[2]] = value
        for name, point in points.items():
            curves.setdefault(name, []).append(point)
    return curves


def summarize(train: list[dict], evals: list[dict], *, tail: int = 5) -> dict[str, Any]:
    """Final loss and perplexity, median throughput over the last ``tail`` logged iterations (skipping the
    first, which pays for warm-up), MFU when the trainer could compute it, validation loss/ppl when run, and
    each named validation set's last evaluation (``valid_sets``: name -> iteration, loss, ppl, bpb)."""
    if not train:
        return {}
    last = train[-1]
    steady = train[1:][-tail:] or train[-tail:]

    def median(key: str) -> float | None:
        values = sorted(r[key] for r in steady if isinstance(r.get(key), int | float))
        return values[len(values) // 2] if values else None

    out: dict[str, Any] = {
        "iterations": last["iteration"],
        "final_loss": last["loss"],
        "perplexity": math.exp(min(last["loss"], 700.0)),
        "consumed_tokens": last.get("consumed_tokens"),
        "tokens_per_s": median("tokens_per_s"),
        "tflops": median("tflops"),
        "mfu": median("mfu"),
    }
    overall = [r for r in evals if "valid_loss" in r]
    if overall:
        out["valid_loss"] = overall[-1]["valid_loss"]
        out["valid_ppl"] = overall[-1].get("valid_ppl", math.exp(min(overall[-1]["valid_loss"], 700.0)))
    curves = set_curves(evals)
    if curves:
        out["valid_sets"] = {name: points[-1] for name, points in sorted(curves.items())}
    return out


def plot_loss(train: list[dict], evals: list[dict], png: str | Path) -> Path:
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
        bpb = all("bpb" in p for points in curves.values() for p in points)
        for name, points in sorted(curves.items()):
            per_set.plot([p["iteration"] for p in points], [p["bpb" if bpb else "loss"] for p in points], "o-",
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


def training_markdown(summary: dict[str, Any], *, paths: dict[str, str], png: str | Path | None = None,
                      embed_png: bool = True) -> str:
    """The training summary artifact: headline numbers, where things are, and the loss curve."""
    mfu = summary.get("mfu")
    rows = [
        ("iterations", _fmt(summary.get("iterations"), "d")),
        ("final training loss", _fmt(summary.get("final_loss"), ".4f")),
        ("perplexity (exp loss)", _fmt(summary.get("perplexity"), ".2f")),
        ("validation loss / ppl", f"{_fmt(summary.get('valid_loss'), '.4f')} / {_fmt(summary.get('valid_ppl'), '.2f')}"),
        ("tokens/s (median, steady state)", _fmt(summary.get("tokens_per_s"), ",.0f")),
        ("TFLOP/s per device", _fmt(summary.get("tflops"), ".4f")),
        ("MFU", "n/a (no device peak known, e.g. CPU)" if mfu is None else f"{100 * mfu:.1f}%"),
    ]
    lines = ["# Training summary", "", "| metric | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    sets = summary.get("valid_sets") or {}
    if sets:
        lines += ["", "## Validation per set (last evaluation)", "",
                  "| set | iteration | loss | ppl | bits per byte |", "|---|---|---|---|---|"]
        lines += [f"| {name} | {_fmt(p.get('iteration'), 'd')} | {_fmt(p.get('loss'), '.4f')} | "
                  f"{_fmt(p.get('ppl'), '.2f')} | {_fmt(p.get('bpb'), '.4f')} |" for name, p in sets.items()]
    lines += ["", "| output | path |", "|---|---|"]
    lines += [f"| {k} | `{v}` |" for k, v in paths.items()]
    if png is not None and Path(png).exists():
        what = "Loss curve (right: each set's validation bits per byte)" if sets else "Loss curve"
        lines += ["", f"{what}: `{png}`", ""]
        if embed_png:  # inline, so the artifact shows the plot without a file server (~20 KB)
            lines.append(png_markdown(png, "loss curve"))
    return "\n".join(lines) + "\n"
