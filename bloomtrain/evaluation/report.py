"""An evaluation's results and its files: ``eval.json`` (``EvalReport``), ``eval.md`` (tables) and ``eval.png``.

Bits per byte = summed token NLL / (ln 2 x UTF-8 bytes of the texts): models with different tokenizers
compare on it, per-token loss and perplexity compare only models that share a tokenizer. ``overall`` pools
every document (so larger languages weigh more). Nothing run-dependent (times, hosts) is written: the same
inputs give the same files. All three go through ``bloomdata.durable`` (atomic writes).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from bloomdata import durable
from bloomtrain.measures import bits_per_byte, perplexity

OVERALL = "overall"


class Score(BaseModel):
    """Scores over a set of documents. ``loss`` is per token in nats; None when no token was scored."""

    docs: int
    bytes: int  # UTF-8 bytes of the texts
    tokens: int  # tokens scored (every token of every document)
    nll_sum: float  # nats
    loss: float | None
    ppl: float | None
    bpb: float | None

    @classmethod
    def of(cls, docs: int, nbytes: int, tokens: int, nll_sum: float) -> Score:
        loss = nll_sum / tokens if tokens else None
        return cls(docs=docs, bytes=nbytes, tokens=tokens, nll_sum=nll_sum, loss=loss,
                   ppl=None if loss is None else perplexity(loss),
                   bpb=bits_per_byte(nll_sum, nbytes) if tokens and nbytes else None)


class ModelResult(BaseModel):
    path: str
    start_token: str  # what every document is scored after
    start_id: int
    languages: dict[str, Score]
    overall: Score


class DataSummary(BaseModel):
    sources: list[str]  # [LANG=]PATH of every source
    rows_read: int
    documents: int
    rejects: dict[str, int]  # reason -> rows, as `bloomdata build` counts them
    rejects_total: int
    reject_examples: list[dict[str, Any]] = Field(default_factory=list)


class EvalReport(BaseModel):
    """``eval.json``."""

    models: dict[str, ModelResult]
    tasks: dict[str, dict[str, dict[str, float]]] = Field(default_factory=dict)  # task -> model -> metric -> value
    task_splits: dict[str, str] = Field(default_factory=dict)  # task -> the split lm-eval scored
    data: DataSummary
    settings: dict[str, Any] = Field(default_factory=dict)  # context, stride, dtype, ... of the run

    @property
    def languages(self) -> list[str]:
        """Every language of any model, in first-seen order."""
        seen: dict[str, None] = {}
        for result in self.models.values():
            seen.update(dict.fromkeys(result.languages))
        return list(seen)

    def bpb_rows(self) -> list[tuple[str, dict[str, float | None]]]:
        """(language or 'overall', model -> bits per byte) rows."""
        rows = [(lang, {m: (r.languages[lang].bpb if lang in r.languages else None) for m, r in self.models.items()})
                for lang in self.languages]
        return rows + [(OVERALL, {m: r.overall.bpb for m, r in self.models.items()})]

    def summary(self) -> dict[str, Any]:
        """The short form ``bloomtrain evaluate --json`` prints."""
        return {"models": {m: {"bpb": r.overall.bpb, "loss": r.overall.loss,
                               "languages": {lang: s.bpb for lang, s in r.languages.items()}}
                           for m, r in self.models.items()},
                "tasks": self.tasks, "documents": self.data.documents, "rejects_total": self.data.rejects_total}


def _cells(values: dict[str, float | None], lower_is_better: bool, digits: int) -> list[str]:
    """One formatted cell per model, the best in bold ('-' where a model has no value)."""
    present = [v for v in values.values() if v is not None]
    best = (min(present) if lower_is_better else max(present)) if present else None
    return ["-" if v is None else f"**{v:.{digits}f}**" if v == best else f"{v:.{digits}f}" for v in values.values()]


def markdown(report: EvalReport) -> str:
    names = list(report.models)
    first = next(iter(report.models.values()))
    head = "| " + " | ".join(names) + " |"
    rule = "|" + "---:|" * len(names)
    lines = ["# Evaluation", "",
             f"{report.data.documents:,} documents in {len(report.languages)} language(s); every token scored once "
             f"after the document-start token, context {report.settings.get('context')} tokens, stride "
             f"{report.settings.get('stride')}.", "",
             "## Bits per byte (lower is better; best per row in bold)", "",
             "| language | docs | bytes " + head, "|---|---:|---:" + rule]
    for lang, values in report.bpb_rows():
        score = first.overall if lang == OVERALL else next(r.languages[lang] for r in report.models.values()
                                                             if lang in r.languages)
        lines.append(f"| {lang} | {score.docs:,} | {score.bytes:,} | " + " | ".join(_cells(values, True, 4)) + " |")
    lines += ["", "## Loss per token in nats (compare only models sharing a tokenizer)", "",
              "| language " + head, "|---" + rule]
    for lang in [*report.languages, OVERALL]:
        scores = {m: (r.overall if lang == OVERALL else r.languages.get(lang)) for m, r in report.models.items()}
        cells = ["-" if s is None or s.loss is None else f"{s.loss:.4f} ({s.tokens:,} tok, ppl {s.ppl:.2f})"
                 for s in scores.values()]
        lines.append(f"| {lang} | " + " | ".join(cells) + " |")
    if report.tasks:
        lines += ["", "## Downstream tasks (lm-evaluation-harness; higher is better, best per row in bold)", "",
                  "| task | metric " + head, "|---|---" + rule]
        for task, per_model in report.tasks.items():
            metrics = sorted({k for values in per_model.values() for k in values if "stderr" not in k})
            for metric in metrics:
                values = {m: per_model.get(m, {}).get(metric) for m in names}
                lines.append(f"| {task} | {metric} | " + " | ".join(_cells(values, False, 4)) + " |")
    rejected = {k: v for k, v in report.data.rejects.items() if v}
    lines += ["", f"Rejected rows: {report.data.rejects_total:,}" + (f" ({rejected})" if rejected else "")
              + f" of {report.data.rows_read:,} read. Document-start token: "
              + ", ".join(f"{m} `{r.start_token}`" for m, r in report.models.items()) + "."]
    return "\n".join(lines) + "\n"


def chart_png(report: EvalReport) -> bytes:
    """Bits per byte per language (and overall), one bar per model, as PNG bytes."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    rows = report.bpb_rows()
    names = list(report.models)
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.35 * len(rows) * max(1, len(names)) + 2), 4.5))
    for k, name in enumerate(names):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(rows))]
        ax.bar(xs, [values[name] or 0.0 for _, values in rows], width, label=name)
    ax.set_xticks(range(len(rows)), [lang for lang, _ in rows], rotation=60, ha="right")
    ax.set_ylabel("bits per byte (lower is better)")
    ax.set_title("Bits per byte per language")
    ax.legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


def write_report(report: EvalReport, out_dir: str | Path) -> dict[str, Path]:
    """Write eval.json, eval.md and eval.png into ``out_dir``; returns their paths by kind."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {kind: out / f"eval.{kind}" for kind in ("json", "md", "png")}
    durable.write_json(paths["json"], report.model_dump(mode="json"), indent=1)
    durable.write_text(paths["md"], markdown(report))
    durable.write_bytes(paths["png"], chart_png(report))
    return paths
