"""Turn a training run's ``metrics.jsonl`` into the numbers, plot and Markdown the flows publish.

Prefect-free on purpose: the flows only hand the results to ``create_*_artifact``, and tests check the
numbers against a hand-written metrics file. ``metrics.jsonl`` is the trainer's record of truth
(``bloomtrain.metrics``): one JSON object per logged iteration (``iteration, loss, tokens_per_s, tflops,
mfu`` when the device peak is known, ...) and one per evaluation (``iteration, valid_loss, valid_ppl``).
A resumed run appends to the same file, so later records for an iteration replace earlier ones.
"""

from __future__ import annotations

import base64
import json
import math
from pathlib import Path
from typing import Any


def read_metrics(path: str | Path) -> tuple[list[dict], list[dict]]:
    """(training records, evaluation records), each sorted by iteration, last write wins; [] if absent."""
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
        if "valid_loss" in rec:
            evals[rec["iteration"]] = rec
        elif "loss" in rec:
            train[rec["iteration"]] = rec
    return [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)]


def summarize(train: list[dict], evals: list[dict], *, tail: int = 5) -> dict[str, Any]:
    """Final loss and perplexity, median throughput over the last ``tail`` logged iterations (skipping the
    first, which pays for warm-up), MFU when the trainer could compute it, validation loss/ppl when run."""
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
    if evals:
        out["valid_loss"] = evals[-1]["valid_loss"]
        out["valid_ppl"] = evals[-1].get("valid_ppl", math.exp(min(evals[-1]["valid_loss"], 700.0)))
    return out


def plot_loss(train: list[dict], evals: list[dict], png: str | Path) -> Path:
    """Training loss per iteration (and validation points) as a PNG."""
    import matplotlib  # noqa: PLC0415 - only the report pays for matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    ax.plot([r["iteration"] for r in train], [r["loss"] for r in train], label="train loss")
    if evals:
        ax.plot([r["iteration"] for r in evals], [r["valid_loss"] for r in evals], "o-", label="validation loss")
    ax.set_xlabel("iteration")
    ax.set_ylabel("loss (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png)
    plt.close(fig)
    return png


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
    lines += ["", "| output | path |", "|---|---|"]
    lines += [f"| {k} | `{v}` |" for k, v in paths.items()]
    if png is not None and Path(png).exists():
        lines += ["", f"Loss curve: `{png}`", ""]
        if embed_png:  # inline, so the artifact shows the plot without a file server (~20 KB)
            data = base64.b64encode(Path(png).read_bytes()).decode()
            lines.append(f"![loss curve](data:image/png;base64,{data})")
    return "\n".join(lines) + "\n"
