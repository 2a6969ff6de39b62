"""``clean_flow``: filter, deduplicate and redact a corpus before tokenization (``bloomdata clean``), and report it.

The work is the library's own: ``run_clean`` on the stage's ``CleanConfig`` (``CleanStageConfig``), which places
its per-shard tasks on a fresh ``LocalCluster`` of ``config.workers`` processes, on an existing cluster when
``config.scheduler`` is set, or in the flow process with ``workers: 0``; it is resumable by its own markers, so
a retry redoes only the unfinished shards. The flow writes exactly what a user running the command gets:
``out_dir/data/<lang>/*.jsonl.zst`` (what the tokenizer trainer and the build read next), clean_summary.json,
removed.jsonl.zst, clean.md and clean.png.

The flow adds skip-or-run (``flows.stages.Stage``, the result being the ``CleanSummary``; the key folds the
config, minus how it runs, and the input files' sizes and mtimes), a table artifact (per language: documents and bytes
in and kept, documents removed by each step, addresses redacted) and a Markdown artifact with clean.png, as the blend
stage shows its chart. ``cleaned_sources`` turns the stage's result into the next stages' sources.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from bloomdata.clean import CleanConfig, CleanSummary, format_summary, run_clean
from bloomdata.clean.summary import LangCounts
from bloomdata.config_loader import derive
from bloomdata.readers import SourceConfig
from flows.config import CleanStageConfig
from flows.console import bars
from flows.data import source_files
from flows.failures import transient, user_errors
from flows.report import png_markdown
from flows.results import CleanResult
from flows.stages import Stage, stage_key


@task(name="clean-corpus", retries=1, retry_delay_seconds=2, retry_condition_fn=transient)
def clean_task(config: CleanConfig) -> CleanSummary:
    """One clean run (a retry reuses every shard already marked done)."""
    return run_clean(config)


def clean_rows(summary: CleanSummary) -> list[dict[str, Any]]:
    """Per language: documents and bytes in and kept, documents removed by each step that removed any, addresses
    redacted; then the total."""
    langs = summary.languages
    reasons = summary.reasons_seen()
    total = LangCounts()
    for c in langs.values():
        total.add(c)
    return [{"language": name, "documents in": c.documents_in, "kept": c.documents_kept,
             "bytes in": c.bytes_in, "bytes kept": c.bytes_kept,
             **{f"removed: {r}": c.removed.get(r, 0) for r in reasons},
             "e-mails redacted": c.emails_redacted, "IPs redacted": c.ips_redacted}
            for name, c in [*langs.items(), ("total", total)]]


def clean_artifacts(summary: CleanSummary) -> None:
    kept, docs = summary.documents_kept, summary.documents_in
    create_table_artifact(clean_rows(summary), key="clean-report",
                          description=f"{kept:,} of {docs:,} documents kept; removed per step, PII redacted")
    png = Path(summary.report_png)
    md = [f"# Clean: {kept:,} of {docs:,} documents kept", "",
          f"Cleaned data: `{summary.data_dir}`; report `{summary.report_md}`; examples of every removal "
          f"reason: `{summary.removed_file}`.", ""]
    if png.exists():
        md.append(png_markdown(png, "clean"))
    create_markdown_artifact("\n".join(md), key="clean-chart",
                             description="share of documents and bytes kept and removed by each step, per language")


def cleaned_sources(cleaned: CleanResult) -> list[SourceConfig]:
    """The cleaned shards as sources, one per language (named as the clean named its outputs, which the build's
    output names keep): what the tokenizer trainer and the build read after this stage."""
    return [SourceConfig(paths=[o.directory], lang=name) for name, o in cleaned.result.outputs.items()]


def input_files(config: CleanConfig) -> list[str]:
    """Files whose change must re-run the stage: the documents, and the models and word lists it is given."""
    q = config.quality
    lists = [v for words in (q.closed_class_words, q.flagged_words) for v in words.values() if isinstance(v, str)]
    models = [config.lang_id.model] if config.lang_id.model else []
    return [*source_files(config.sources), *models, *config.perplexity.models.values(), *lists]


def _clean(config: CleanConfig) -> CleanSummary:
    log = get_run_logger()
    where = config.scheduler or (f"a LocalCluster of {config.workers} processes" if config.workers else "this process")
    log.info("clean: %d source(s) on %s -> %s", len(config.sources), where, config.out_dir)
    cleaned = clean_task(derive(config, progress=config.progress or bars()))
    log.info("%s", format_summary(cleaned))
    return cleaned


@flow(name="bloom-clean")
@user_errors
def clean_flow(config: CleanStageConfig = CleanStageConfig(), upstream: list[str] | None = None) -> CleanResult:
    """Filter, deduplicate and redact the corpus into per-language cleaned shards, with a report (skipped when
    done)."""
    out = Path(config.out_dir).resolve()
    # What the output is made of: not how it runs (the output is the same for any workers or cluster).
    key = stage_key(config.model_dump(exclude={"progress", "workers", "scheduler", "dashboard"}),
                    upstream=upstream or [], inputs=input_files(config))
    stage = Stage("clean", out, key, CleanSummary, config)
    return stage.run(lambda: _clean(derive(config, out_dir=str(out))), publish=clean_artifacts,
                     outputs=lambda cleaned: {"summary": out / "clean_summary.json", "data": cleaned.data_dir})
