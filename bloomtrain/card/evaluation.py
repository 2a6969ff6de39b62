"""The evaluation section of a model card and its ``model-index`` results.

- Held-out text: this model's per-language scores in eval.json (``bloomtrain evaluate``): documents, bytes, tokens,
  loss, perplexity and bits per byte, then lm-eval task scores when tasks ran. The ``model-index`` results are
  exactly these numbers: one entry per language and metric (loss, perplexity, bits per byte) on that language's
  documents of the evaluation split (``CardConfig.evaluation_split``), and one per task metric on the split lm-eval
  scored (eval.json's ``task_splits``).
- Validation during training: ``validation_curves.png`` and the last evaluation of every named set (the
  pipeline's one validation set per language), from metrics.jsonl.

With neither, the section is left out and one line says so.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import EvalResult

from bloomtrain.card.images import CURVES_PNG, validation_curves
from bloomtrain.card.markdown import fmt, note, table
from bloomtrain.card.records import CardRecords, ModelEvaluation
from bloomtrain.evaluation.report import OVERALL

TASK = "text-generation"
LM_METRICS = (("loss", "loss", "loss (nats/token)"), ("ppl", "perplexity", "perplexity"),
              ("bpb", "bits_per_byte", "bits per byte"))  # Score field, model-index metric type, its name


def eval_results(evaluation: ModelEvaluation | None, split: str) -> list[EvalResult]:
    """One ``EvalResult`` per language and metric of this model's eval.json scores, then per task metric."""
    if evaluation is None:
        return []
    results = []
    for lang, score in evaluation.result.languages.items():
        for key, metric_type, metric_name in LM_METRICS:
            value = getattr(score, key)
            if value is not None:
                results.append(EvalResult(
                    task_type=TASK, task_name="Language modelling", dataset_type="bloomstack-heldout",
                    dataset_name=f"held-out {lang} documents", dataset_config=lang, dataset_split=split,
                    metric_type=metric_type, metric_name=metric_name, metric_value=value))
    for task, metrics in evaluation.tasks.items():
        for metric, value in metrics.items():
            if "stderr" not in metric:
                results.append(EvalResult(task_type=TASK, task_name="lm-evaluation-harness", dataset_type=task,
                                          dataset_name=task, dataset_split=evaluation.task_splits.get(task),
                                          metric_type=metric, metric_value=value))
    return results


def heldout_part(r: CardRecords) -> str:
    e = r.evaluation
    if e is None:
        return note("held-out evaluation", "no eval.json was given (score the model with `bloomtrain evaluate`, then "
                    "rebuild the card with `bloomtrain model-card DIR --evaluation eval.json`)")
    scores = [*e.result.languages.items(), (OVERALL, e.result.overall)]
    rows = [(lang, f"{s.docs:,}", f"{s.bytes:,}", f"{s.tokens:,}", fmt(s.loss, ".4f"), fmt(s.ppl, ".2f"),
             fmt(s.bpb, ".4f")) for lang, s in scores]
    split = r.provenance.card.evaluation_split
    parts = ["### Held-out text",
             f"`bloomtrain evaluate` scored this model (`{e.name}` in `{e.path}`) on each language's {split} "
             f"documents: every token once, after the document-start token, context {e.settings.get('context')} "
             "tokens. Bits per byte compares models with different tokenizers; loss and perplexity only models "
             "that share this tokenizer.",
             table(["language", "documents", "bytes", "tokens", "loss (nats/token)", "perplexity", "bits per byte"],
                   rows)]
    if e.tasks:
        task_rows = [(task, e.task_splits.get(task, "-"), metric, f"{value:.4f}") for task, metrics in e.tasks.items()
                     for metric, value in metrics.items() if "stderr" not in metric]
        parts += ["Downstream tasks (lm-evaluation-harness):",
                  table(["task", "split", "metric", "value"], task_rows, 3)]
    return "\n\n".join(parts)


def training_validation(r: CardRecords, out_dir: Path) -> str | None:
    png = validation_curves(r.evals, out_dir)
    if png is None:
        return None
    parts = ["### Validation during training", f"![Validation curves]({CURVES_PNG})"]
    if r.summary is not None and r.summary.valid_sets:
        rows = [(name, p.iteration, fmt(p.loss, ".4f"), fmt(p.ppl, ".2f"), fmt(p.bpb, ".4f"))
                for name, p in r.summary.valid_sets.items()]
        parts += ["Each set at the last evaluation (its dataset's validation split):",
                  table(["set", "iteration", "loss (nats/token)", "perplexity", "bits per byte"], rows)]
    return "\n\n".join(parts)


def evaluation_section(r: CardRecords, out_dir: Path) -> str:
    during = training_validation(r, out_dir)
    if r.evaluation is None and during is None:
        return note("evaluation", "no eval.json was given and the run did not validate (score the model with "
                    "`bloomtrain evaluate`, then `bloomtrain model-card DIR --evaluation eval.json`)")
    return "\n\n".join(["## Evaluation", heldout_part(r), *([during] if during else [])])
