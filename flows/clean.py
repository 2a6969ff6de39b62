"""``clean_flow``: filter, deduplicate and redact a corpus before tokenization (``bloomdata clean``), and report it.

The work is the library's own: ``run_clean`` on the stage's ``CleanConfig`` (``CleanStageConfig``), which places
its per-shard tasks on a fresh ``LocalCluster`` of ``config.workers`` processes, on an existing cluster when
``config.scheduler`` is set, or in the flow process with ``workers: 0``; it is resumable by its own markers, so
a retry redoes only the unfinished shards. The flow writes exactly what a user running the command gets:
``out_dir/data/<lang>/*.jsonl.zst`` (what the tokenizer trainer and the build read next), clean_summary.json,
removed.jsonl.zst, clean.md and clean.png.

The flow adds the stage marker (skipped when done; the key folds the config, minus how it runs, and the
input files' sizes and mtimes), a table artifact (per language: documents and bytes in and kept, documents
removed by each step, addresses redacted) and a Markdown artifact with clean.png, as the blend stage shows
its chart. ``cleaned_sources`` turns the stage's result into the next stages' sources.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from bloomdata.clean import CleanConfig, CleanSummary, format_summary, run_clean
from bloomdata.clean.config import REASONS
from bloomdata.readers import SourceConfig
from flows.config import CleanStageConfig
from flows.data import source_files
from flows.failures import transient, user_errors
from flows.report import png_markdown
from flows.stages import completed, config_hash, write_marker


@task(name="clean-corpus", retries=1, retry_delay_seconds=2, retry_condition_fn=transient)
def clean_task(config: CleanConfig) -> CleanSummary:
    """One clean run (a retry reuses every shard already marked done)."""
    return run_clean(config)


def clean_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per language: documents and bytes in and kept, documents removed by each step that removed any, addresses
    redacted; then the total."""
    langs = summary["languages"]
    reasons = [r for r in REASONS if any(c["removed"].get(r) for c in langs.values())]
    rows = []
    for name, c in [*langs.items(), ("total", None)]:
        if c is None:  # the total row: sums over the languages
            c = {k: sum(x[k] for x in langs.values()) for k in ("documents_in", "documents_kept", "bytes_in",
                                                               "bytes_kept", "emails_redacted", "ips_redacted")}
            c["removed"] = {r: sum(x["removed"].get(r, 0) for x in langs.values()) for r in reasons}
        rows.append({"language": name, "documents in": c["documents_in"], "kept": c["documents_kept"],
                     "bytes in": c["bytes_in"], "bytes kept": c["bytes_kept"],
                     **{f"removed: {r}": c["removed"].get(r, 0) for r in reasons},
                     "e-mails redacted": c["emails_redacted"], "IPs redacted": c["ips_redacted"]})
    return rows


def clean_artifacts(summary: dict[str, Any]) -> None:
    kept, docs = summary["documents_kept"], summary["documents_in"]
    create_table_artifact(clean_rows(summary), key="clean-report",
                          description=f"{kept:,} of {docs:,} documents kept; removed per step, PII redacted")
    png = Path(summary["report_png"])
    md = [f"# Clean: {kept:,} of {docs:,} documents kept", "",
          f"Cleaned data: `{summary['data_dir']}`; report `{summary['report_md']}`; examples of every removal "
          f"reason: `{summary['removed_file']}`.", ""]
    if png.exists():
        md.append(png_markdown(png, "clean"))
    create_markdown_artifact("\n".join(md), key="clean-chart",
                             description="share of documents and bytes kept and removed by each step, per language")


def cleaned_sources(result: dict[str, Any]) -> list[SourceConfig]:
    """The cleaned shards as sources, one per language (named as the clean named its outputs, which the build's
    output names keep): what the tokenizer trainer and the build read after this stage."""
    return [SourceConfig(paths=[o["directory"]], lang=name) for name, o in result["summary"]["outputs"].items()]


def input_files(config: CleanConfig) -> list[str]:
    """Files whose change must re-run the stage: the documents, and the models and word lists it is given."""
    q = config.quality
    lists = [v for words in (q.closed_class_words, q.flagged_words) for v in words.values() if isinstance(v, str)]
    models = [config.lang_id.model] if config.lang_id.model else []
    return [*source_files(config.sources), *models, *config.perplexity.models.values(), *lists]


@flow(name="clean")
@user_errors
def clean_flow(config: CleanStageConfig = CleanStageConfig(), upstream: list[str] | None = None) -> dict[str, Any]:
    """Filter, deduplicate and redact the corpus into per-language cleaned shards, with a report (skipped when
    done)."""
    log = get_run_logger()
    out = Path(config.out_dir).resolve()
    # What the output is made of: not how it runs (the output is the same for any workers or cluster).
    digest = config_hash(config.model_dump(exclude={"progress", "workers", "scheduler"}), upstream=upstream or [],
                         inputs=input_files(config))
    if marker := completed(out, digest):
        log.info("clean: skipped, %s already holds clean %s", out, digest)
        clean_artifacts(marker.summary["summary"])
        return marker.summary
    where = config.scheduler or (f"a LocalCluster of {config.workers} processes" if config.workers else "this process")
    log.info("clean: %d source(s) on %s -> %s", len(config.sources), where, out)
    cleaned = clean_task(config.model_copy(update={"out_dir": str(out), "progress": False}))
    log.info("%s", format_summary(cleaned))
    # Stage results are JSON types (they live in the stage marker and in Prefect): clean_summary.json's fields.
    summary = cleaned.model_dump(mode="json")
    clean_artifacts(summary)
    result = {"out_dir": str(out), "data_dir": summary["data_dir"], "summary": summary, "hash": digest}
    write_marker(out, stage="clean", digest=digest, summary=result, config=config,
                 outputs={"summary": out / "clean_summary.json", "data": summary["data_dir"]})
    return result
