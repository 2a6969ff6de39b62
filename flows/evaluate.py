"""``evaluate_flow``: bits per byte, loss and perplexity per language of the exported model and reference models.

The scoring is ``bloomtrain evaluate``'s own (``run_evaluation`` on the ``EvaluateConfig`` the stage config
resolves to), so the flow writes exactly the files a user running the command gets: eval.json, eval.md and
eval.png. What is scored, by default, is held-out text: each blend dataset's validation documents, which no
training sample draws from, decoded back to text (``bloomtrain.evaluation.heldout``; written to ``heldout/<lang>.jsonl``
first, and read from there like any ``--data`` input). ``sources`` replaces them with other documents.

The flow adds skip-or-run (``flows.stages.Stage``; the result is an ``Evaluation``; the key folds the export's key in
the pipeline, and the model directories, blend, datasets and tokenizer files as inputs), a table artifact (bits per
byte, loss and perplexity per language and model) and a Markdown artifact with the chart. A user error
(``BloomstackError``: a model that does not load, a blend without a validation split, ...) ends the run Failed with that
one line as its message, not a traceback (``flows.failures.user_errors``, as every flow).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from bloomdata.blend.spec import load_blend_spec
from bloomdata.config_loader import derive
from bloomdata.megatron.indexed import data_file_path, index_file_path
from bloomdata.readers import SourceConfig
from bloomtrain.card import CARD_FILES
from bloomtrain.evaluation.config import ModelSpec
from bloomtrain.evaluation.heldout import HeldOutFile, heldout_files
from bloomtrain.evaluation.report import OVERALL, EvalReport, ModelResult
from flows.config import EvaluateStageConfig
from flows.console import bars
from flows.data import source_files
from flows.failures import user_errors
from flows.report import png_markdown
from flows.results import EvaluateResult, Evaluation
from flows.stages import Stage, stage_key


@task(name="heldout-documents")
def heldout_task(config: EvaluateStageConfig, out_dir: str) -> list[HeldOutFile]:
    """Each blend dataset's validation documents as ``out_dir/heldout/<name>.jsonl``."""
    return heldout_files(config.blend, config.tokenizer, Path(out_dir) / "heldout", config.compat,
                         config.max_docs_per_lang)


@task(name="evaluate-models")
def evaluate_task(config: EvaluateStageConfig, sources: list[SourceConfig]) -> EvalReport:
    """``run_evaluation`` (writes eval.json/md/png into ``config.out_dir``)."""
    from bloomtrain.evaluation.run import run_evaluation  # noqa: PLC0415 - torch only when evaluating

    return run_evaluation(config.scoring(sources))


def bpb_rows(models: dict[str, ModelResult]) -> list[dict[str, Any]]:
    """Per language (then overall): documents, bytes, and each model's bits per byte, loss and perplexity."""
    langs = list(dict.fromkeys(lang for m in models.values() for lang in m.languages))
    rows = []
    for lang in [*langs, OVERALL]:
        scores = {name: (m.overall if lang == OVERALL else m.languages.get(lang)) for name, m in models.items()}
        first = next(s for s in scores.values() if s is not None)
        row: dict[str, Any] = {"language": lang, "docs": first.docs, "bytes": first.bytes}
        for name, s in scores.items():
            for key, digits in (("bpb", 4), ("loss", 4), ("ppl", 2)):
                value = None if s is None else getattr(s, key)
                row[f"{name} {key}"] = None if value is None else round(value, digits)
        rows.append(row)
    return rows


def bpb_table(models: dict[str, ModelResult]) -> str:
    """The per-language bits-per-byte table as plain text (``python -m flows.demo`` ends with it)."""
    names = list(models)
    width = max(8, *(len(n) for n in names))
    lines = [f"{'language':<10}{'docs':>6}{'bytes':>10}" + "".join(f"{n:>{width + 2}}" for n in names)]
    for row in bpb_rows(models):
        cells = "".join(f"{'-' if row[f'{n} bpb'] is None else format(row[f'{n} bpb'], '.4f'):>{width + 2}}"
                        for n in names)
        lines.append(f"{row['language']:<10}{row['docs']:>6}{row['bytes']:>10,}" + cells)
    return "\n".join(lines)


def evaluate_artifacts(evaluation: Evaluation) -> None:
    models, heldout, out = evaluation.models, evaluation.heldout, Path(evaluation.eval_json).parent
    create_table_artifact(bpb_rows(models), key="evaluation-bpb",
                          description="bits per byte, loss (nats/token) and perplexity per language and model")
    md = ["# Evaluation on held-out text", "", f"`{out / 'eval.json'}`, `{out / 'eval.md'}`", ""]
    if heldout:
        md += ["Each language's validation documents (never in a training sample), decoded from its dataset:", "",
               "| language | documents of the validation range | scored |", "|---|---|---:|"]
        md += [f"| {h.name} | [{h.valid_range[0]}, {h.valid_range[1]}) of `{h.prefix}` | {h.docs} |" for h in heldout]
        md.append("")
    md += ["Bits per byte (lower is better):", "", "```", bpb_table(models), "```", ""]
    png = out / "eval.png"
    if png.exists():
        md.append(png_markdown(png, "bits per byte"))
    create_markdown_artifact("\n".join(md), key="evaluation-chart", description="bits per byte per language")


def input_files(config: EvaluateStageConfig) -> list[str]:
    """Files whose change must re-run the stage: the models, and the documents (blend, datasets, tokenizer)."""
    models = [m.path for m in config.models] + [ModelSpec.model_validate(m).path for m in config.reference_models]
    # a model directory's files but its card's: rebuilding the card (after this stage) does not change the model
    paths = [str(f) for m in models for f in (sorted(Path(m).iterdir()) if Path(m).is_dir() else [Path(m)])
             if f.name not in CARD_FILES]
    if config.sources:
        return paths + source_files(config.sources)
    spec = load_blend_spec(config.blend)
    tokenizer = Path(config.tokenizer)
    paths += [config.blend, str(tokenizer / "tokenizer.json" if tokenizer.is_dir() else tokenizer)]
    return paths + [f(d.prefix) for d in spec.datasets for f in (index_file_path, data_file_path)]


def _evaluate(run: EvaluateStageConfig) -> Evaluation:
    log = get_run_logger()
    out = Path(run.out_dir)
    if run.sources:
        heldout, sources = [], run.sources
    else:
        heldout = heldout_task(run, str(out))
        sources = [SourceConfig(paths=[h.path], lang=h.name) for h in heldout]
        log.info("evaluate: %d held-out documents from the validation ranges of %s", sum(h.docs for h in heldout),
                 run.blend)
    report = evaluate_task(derive(run, progress=run.progress or bars()), sources)
    log.info("evaluate: bits per byte per language\n%s", bpb_table(report.models))
    # eval.json's per-model scores (small: languages x models), for the pipeline's summary and the demo
    return Evaluation(eval_json=str(out / "eval.json"), heldout=heldout, models=report.models)


@flow(name="bloom-evaluate")
@user_errors
def evaluate_flow(config: EvaluateStageConfig = EvaluateStageConfig(),
                  upstream: list[str] | None = None) -> EvaluateResult:
    """Score the models (and reference models) on held-out text per language: by default each blend dataset's
    validation documents (skipped when done)."""
    out = Path(config.out_dir).resolve()
    run = derive(config, out_dir=str(out))
    key = stage_key(run.model_dump(exclude={"progress"}), upstream=upstream or [], inputs=input_files(run))
    return Stage("evaluate", out, key, Evaluation, config).run(
        lambda: _evaluate(run), publish=evaluate_artifacts,
        outputs=lambda _: {"report": out / "eval.json", "table": out / "eval.md", "chart": out / "eval.png"})
