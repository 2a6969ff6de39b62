"""``tokenizer_flow`` and ``dataset_flow``: thin Prefect wrappers over ``bloomdata``.

Each flow takes the library's own pydantic config (``TokenizerTrainConfig``, ``BuildConfig``), so the
deployment parameters are exactly the CLI's options. The flow adds what Prefect is for: retries of
transient failures (not of user errors, which end the run Failed with their one line: ``flows.failures``),
skip-or-run by stage marker (``flows.stages.Stage``), typed results (``flows.results``), and artifacts (fertility per
language; tokens per language; a progress bar while the build runs).

Dask: ``dataset_flow`` runs ``bloomdata.build.run_build`` in the flow process, which places one task per
shard on a fresh ``LocalCluster`` of ``config.workers`` processes, or on an existing cluster when
``config.scheduler`` (tcp://host:8786) is set. We do not use ``DaskTaskRunner``: a Prefect task per shard
costs several API calls each and stalls at a few thousand shards (docs/flows.md, "One Dask task per shard,
not one Prefect task"), while the build already has per-shard retries-by-marker; the progress artifact
follows the shard markers instead.
"""

from __future__ import annotations

import contextvars
import glob
import threading
from pathlib import Path
from typing import cast
from uuid import UUID

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_progress_artifact, create_table_artifact, update_progress_artifact

from bloomdata.build import SHARDS_DIR, BuildConfig, BuildSummary, plan_build, run_build
from bloomdata.config_loader import derive
from bloomdata.readers import SourceConfig
from bloomdata.readers.fs import is_remote
from bloomdata.tokenizer.bpe import TokenizerReport, TokenizerTrainConfig, train_tokenizer
from bloomdata.tokenizer.encoder import load_encoder
from bloomdata.tokenizer.fertility import FERTILITY_FILE, FertilityRow, fertility_table, write_fertility
from flows.config import demo_build_config, demo_tokenizer_config
from flows.console import bars
from flows.failures import transient, user_errors
from flows.results import DatasetResult, TokenizerResult, TrainedTokenizer
from flows.stages import Stage, stage_key


def source_files(sources: list[SourceConfig]) -> list[str]:
    """The files behind the sources' paths and globs, so that editing the corpus invalidates a stage."""
    return sorted({f for s in sources for p in s.paths
                   for f in ([p] if is_remote(p) else glob.glob(p, recursive=True) or [p])})


# --- tokenizer ------------------------------------------------------------------------------------------


@task(name="train-tokenizer", retries=1, retry_delay_seconds=2, retry_condition_fn=transient)
def train_tokenizer_task(config: TokenizerTrainConfig) -> TokenizerReport:
    return train_tokenizer(config)


@task(name="fertility")
def fertility_task(tokenizer_dir: str, sources: list[SourceConfig], max_docs_per_lang: int) -> list[FertilityRow]:
    return fertility_table(load_encoder(tokenizer_dir), sources, max_docs_per_lang=max_docs_per_lang)


def fertility_artifact(trained: TrainedTokenizer) -> None:
    table = [{"language": r.lang, "documents": r.docs, "tokens": r.tokens,
              "tokens/word": None if r.tokens_per_word is None else round(r.tokens_per_word, 3),
              "tokens/char": round(r.tokens_per_char, 4)} for r in trained.fertility]
    create_table_artifact(table, key="tokenizer-fertility",
                          description="tokens per word (space-separated scripts) and per character")


def _train_tokenizer(config: TokenizerTrainConfig, fertility_docs_per_lang: int) -> TrainedTokenizer:
    out = config.out_dir
    report = train_tokenizer_task(derive(config, show_progress=False))
    rows = fertility_task(out, config.sources, fertility_docs_per_lang)
    fertility_json = str(Path(out) / FERTILITY_FILE)
    write_fertility(fertility_json, rows, out)
    get_run_logger().info("tokenizer: %d tokens, %d languages -> %s", report.vocab_size, len(report.languages), out)
    return TrainedTokenizer(tokenizer_dir=out, report=report, fertility=rows, fertility_json=fertility_json)


@flow(name="bloom-tokenizer")
@user_errors
def tokenizer_flow(config: TokenizerTrainConfig = demo_tokenizer_config(), fertility_docs_per_lang: int = 200,
                   upstream: list[str] | None = None) -> TokenizerResult:
    """Train a BLOOM byte-level BPE tokenizer and report its fertility per language (skipped when done)."""
    out = Path(config.out_dir).resolve()
    key = stage_key([config, fertility_docs_per_lang], upstream=upstream or [], inputs=source_files(config.sources))
    stage = Stage("tokenizer", out, key, TrainedTokenizer, config)
    run = derive(config, out_dir=str(out))
    return stage.run(lambda: _train_tokenizer(run, fertility_docs_per_lang),
                     outputs=lambda t: {"tokenizer": out / "tokenizer.json", "fertility": t.fertility_json},
                     publish=fertility_artifact)


# --- dataset --------------------------------------------------------------------------------------------


def _follow_shards(out_dir: Path, total: int, stop: threading.Event, every_s: float = 1.0) -> None:
    """Progress artifact from the build's shard markers (written as each shard finishes, on any worker)."""
    progress = cast(UUID, create_progress_artifact(0.0, key="dataset-progress",
                                                   description=f"shards tokenized of {total}"))  # sync: an id
    last = -1
    while not stop.wait(every_s):
        done = len(list((out_dir / SHARDS_DIR).glob("*.done.json")))
        if done != last:
            update_progress_artifact(progress, 100.0 * min(done, total) / max(total, 1))
            last = done
    update_progress_artifact(progress, 100.0)


@task(name="build-dataset", retries=2, retry_delay_seconds=[2, 10], retry_condition_fn=transient)
def build_task(config: BuildConfig) -> BuildSummary:
    """One build; a retry reuses every shard already marked done (the build's own markers)."""
    out = Path(config.out_dir)
    total = len(plan_build(config).shards)
    stop = threading.Event()
    # The artifact client lives in context variables: give the watcher thread a copy of ours.
    watcher = threading.Thread(target=contextvars.copy_context().run, args=(_follow_shards, out, total, stop),
                               daemon=True, name="dataset-progress")
    watcher.start()
    try:
        return run_build(config)
    finally:
        stop.set()
        watcher.join(timeout=10)


def tokens_artifact(built: BuildSummary) -> None:
    total = sum(o.tokens for o in built.outputs.values()) or 1
    table = [{"language": name, "documents": o.documents, "tokens": o.tokens,
              "share": round(o.tokens / total, 4), "bin MB": round(o.bin_bytes / 1e6, 3)}
             for name, o in sorted(built.outputs.items())]
    create_table_artifact(table, key="dataset-tokens", description="tokens per language in the built datasets")


def _build(config: BuildConfig) -> BuildSummary:
    log = get_run_logger()
    where = config.scheduler or f"a LocalCluster of {config.workers} processes"
    log.info("dataset: tokenizing %d source(s) on %s", len(config.sources), where)
    built = build_task(derive(config, progress=config.progress or bars()))
    log.info("dataset: %s documents, %s tokens in %d outputs -> %s", built.documents, built.tokens,
             len(built.outputs), config.out_dir)
    return built


@flow(name="bloom-dataset")
@user_errors
def dataset_flow(config: BuildConfig = demo_build_config(), upstream: list[str] | None = None) -> DatasetResult:
    """Tokenize the corpus into per-language Megatron .bin/.idx datasets on Dask (skipped when done)."""
    out = Path(config.out_dir).resolve()
    tokenizer = Path(config.tokenizer)
    tokenizer_file = tokenizer / "tokenizer.json" if tokenizer.is_dir() else tokenizer
    # What the output is made of: not how it runs (the output is the same for any workers or cluster).
    key = stage_key(config.model_dump(exclude={"progress", "workers", "scheduler", "dashboard"}),
                    upstream=upstream or [], inputs=[*source_files(config.sources), tokenizer_file])
    stage = Stage("dataset", out, key, BuildSummary, config)
    return stage.run(lambda: _build(derive(config, out_dir=str(out))), publish=tokens_artifact,
                     outputs=lambda built: {name: o.prefix + ".idx" for name, o in built.outputs.items()})
