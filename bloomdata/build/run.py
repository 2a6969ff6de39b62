"""Tokenize corpora into Megatron ``.bin/.idx`` datasets: per-shard steps, completion markers and merge.

Design (datatrove's split between steps and executors; Megatron's "tokenize shards, then merge"):

- ``plan_build`` (``bloomdata.readers.plan_job``) cuts the inputs into a deterministic list of shards (a
  file, or a byte range, row group range or record batch range of a large one: about ``shard_bytes`` each,
  smaller when that would leave workers idle; or row ranges with ``max_rows_per_shard``).
  ``tokenize_shard`` is a pure step: it streams one shard in bounded batches through the encoder
  (``bloomdata.tokenizer.encoder``: bloomdata's C++ one by default, HF's with ``encoder: hf``) and writes
  one small dataset per output name (language) under
  ``OUT_DIR/shards/<shard name>/``. ``bloomdata.jobs`` places the steps on Dask workers; nothing here
  knows about Dask. ``BuildJob`` is a ``bloomdata.jobs.runner.ShardedJob``: the lock, the sweeps of stray
  temps, the up-to-date check, the "output holds an input" check and the summary as the build's marker
  are the runner's, shared with ``bloomdata clean``.
- Completion markers (``bloomdata.durable``): a shard is done when ``OUT_DIR/shards/<shard name>.done.json``
  exists, records the same *key* (the content key of shard identity, input size + mtime, tokenizer sha256,
  append_eod, dtype, output naming) and the part files it lists exist with the recorded sizes. The marker
  is written (atomically) only after the parts are published, so a killed worker or build never leaves a
  half-written shard that looks complete; a changed input or tokenizer changes the key and the shard is
  rebuilt, never reused.
- Determinism: outputs are merged in *plan* order, never completion order, and shard outputs depend only
  on the shard's rows, so the bytes are identical for any number of workers, any scheduling and any
  sharding (shard size, whole files, row ranges).
- Line numbers: a byte-range shard cannot know how many lines precede it, so it numbers its rows from its
  own first line and records how many rows it read. The rejects file turns them into file lines from the
  row counts of the shards before it in plan order (a file's ranges are consecutive there); a --strict
  error in a worker counts the lines before its range once (``file_reject``). A changed plan (shard size,
  worker count) gives other shard names and keys: the old shards are swept, the new ones built.
- The merged outputs are ``OUT_DIR/<name>.bin/.idx`` (``name`` = language, or ``output_name`` with
  ``split_by="none"``); the summary is ``OUT_DIR/build_summary.json`` and reject examples (at most
  ``max_reject_examples`` per reason, in plan order) are ``OUT_DIR/rejects.jsonl``. The summary (a
  ``BuildSummary``) is the build's own marker, written last: its key (``fingerprint``) is the content key
  of every shard key and the output settings. Shard parts are deleted after a successful merge unless
  ``keep_shards``; a rerun whose inputs and settings are unchanged finds the summary's fingerprint and does
  nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import time
from collections import Counter
from typing import Any

import numpy as np

from bloomdata import durable
from bloomdata.build.config import LOCK_FILE, REJECTS_FILE, SHARDS_DIR, SUMMARY_FILE, BuildConfig
from bloomdata.build.plan import estimate_outputs
from bloomdata.build.shard import (
    ShardSettings,
    load_marker,
    part_prefix,
    parts_intact,
    shard_key,
    tokenize_shard,
)
from bloomdata.build.summary import BuildSummary, OutputStats, ShardCounts, ShardManifest
from bloomdata.dry_run import PlannedFile, where_text
from bloomdata.errors import BloomstackError
from bloomdata.jobs.placement import Placement
from bloomdata.jobs.runner import JobFiles, JobPlan, JobPreview, ShardedJob, strict_error
from bloomdata.megatron.indexed import (
    IndexedDataset,
    IndexedDatasetWriter,
    best_fitting_dtype,
    data_file_path,
    index_file_path,
    merge_datasets,
)
from bloomdata.readers import (
    REJECT_REASONS,
    Reject,
    Shard,
    ShardPlan,
    file_line_offsets,
    no_documents_error,
    output_name_of,
    plan_job,
)
from bloomdata.tokenizer.bpe import eod_id, load_tokenizer, tokenizer_identity
from bloomdata.tokenizer.encoder import encoder_of, resolve_kind

# ---------------------------------------------------------------------------------------------------------
# Merge


def merge_shards(out_dir: str, shards: list[Shard], manifests: list[ShardManifest],
                 names: set[str], dtype: np.dtype) -> dict[str, OutputStats]:
    """Merge every output name's shard parts, in plan order, into ``OUT_DIR/<name>``; names with no
    documents get an empty dataset. Returns per-output statistics."""
    for manifest in manifests:
        names = names | set(manifest.outputs)
    stats = {}
    for name in sorted(names):
        parts = [part_prefix(out_dir, s, name) for s, m in zip(shards, manifests) if name in m.outputs]
        prefix = os.path.join(out_dir, name)
        if parts:
            ds = merge_datasets(parts, prefix)
        else:
            with IndexedDatasetWriter(prefix, dtype):
                pass
            ds = IndexedDataset(prefix)
        stats[name] = OutputStats(prefix=prefix, documents=ds.num_documents, sequences=len(ds), tokens=ds.num_tokens,
                                  bin_bytes=os.path.getsize(data_file_path(prefix)),
                                  idx_bytes=os.path.getsize(index_file_path(prefix)))
    return stats


def write_rejects(path: str, shards: list[Shard], manifests: list[ShardManifest], max_examples: int) -> None:
    """The first ``max_examples`` rejects of each reason, in plan order (file:line, reason, detail)."""
    taken: Counter[str] = Counter()
    lines = []
    for offset, manifest in zip(file_line_offsets(shards, [m.rows for m in manifests]), manifests):
        for ex in manifest.reject_examples:
            if taken[ex["reason"]] < max_examples:
                taken[ex["reason"]] += 1
                ex = {**ex, "line": ex["line"] + offset}
                lines.append(json.dumps({"where": f"{ex['path']}:{ex['line']}", **ex}, ensure_ascii=False))
    durable.write_text(path, "".join(line + "\n" for line in lines))


def empty_reject_counts() -> dict[str, int]:
    return {reason: 0 for reason in REJECT_REASONS}


# ---------------------------------------------------------------------------------------------------------
# The whole build: plan -> tokenize shards in parallel -> merge in plan order -> summary


def plan_build(config: BuildConfig) -> ShardPlan:
    """The build's shards (``bloomdata.readers.plan_job``, as clean plans its own)."""
    return plan_job(config)


class BuildJob(ShardedJob[BuildSummary, ShardManifest]):
    """One build as a durable sharded job (``bloomdata.jobs.runner``): lock, sweeps, up-to-date check and
    summary are the runner's; the tokenize stage, the --strict check of reused shards and the merge are here."""

    files = JobFiles(writer="build", lock=LOCK_FILE, summary=SUMMARY_FILE)
    summary_type = BuildSummary

    def __init__(self, config: BuildConfig, client: Any = None) -> None:
        """Everything that can fail on user input (missing input, bad tokenizer path, an output holding an
        input) fails here, before anything is written."""
        self.started = time.perf_counter()  # the summary's wall time counts planning too
        self.config = config
        self.shard_plan = plan_build(config)
        shards = self.shard_plan.shards
        if not shards:
            raise BloomstackError("no input files found; check the paths of sources", keys=["sources"])
        self.tokenizer = tok = load_tokenizer(config.tokenizer)
        self.tokenizer_sha = tokenizer_identity(config.tokenizer)
        if config.append_eod:
            eod_id(tok, config.eod_token)  # fails now, not in every worker, when the tokenizer has no such token
        self.dtype = best_fitting_dtype(tok.get_vocab_size())
        out_dir = os.path.abspath(config.out_dir)
        self.settings = ShardSettings(
            tokenizer_path=os.path.abspath(config.tokenizer), out_dir=out_dir, append_eod=config.append_eod,
            eod_token=config.eod_token,
            dtype=self.dtype.name, split_by=config.split_by, output_name=config.output_name, strict=config.strict,
            batch_docs=config.batch_docs, batch_bytes=config.batch_bytes, max_examples=config.max_reject_examples,
            encoder=resolve_kind(tok, config.encoder, config.tokenizer))
        self.names = {config.output_name} if config.split_by == "none" else \
            {output_name_of(s.lang) for s in config.sources if s.lang}
        self.identities = [shard_key(s, self.tokenizer_sha, self.settings) for s in shards]
        keys = [durable.content_key(identity) for identity in self.identities]
        fingerprint = durable.content_key([keys, sorted(self.names), config.max_reject_examples])
        where = Placement(config.workers, config.scheduler, client, config.progress, config.dashboard)
        super().__init__(JobPlan(out_dir, shards, keys, fingerprint, where, config.strict,
                                 self.shard_plan.shard_bytes))

    def load_marker(self, shard: Shard, key: str) -> ShardManifest | None:
        return load_marker(self.plan.out_dir, shard, key)

    def planned_outputs(self) -> list[PlannedFile]:
        encoder = encoder_of(self.tokenizer, self.settings.encoder)  # type: ignore[arg-type]  # resolved: no warning
        return estimate_outputs(self.config, self.plan.shards, encoder, self.dtype, self.names, self.plan.out_dir)

    def first_stage_bytes(self, shard: Shard, manifest: ShardManifest) -> int:
        return sum(p.bin_bytes + p.idx_bytes for p in manifest.outputs.values())

    def bytes_per_input_byte(self) -> float:
        return float(self.dtype.itemsize)  # one id per input byte: about the most a byte-level BPE makes

    def intact(self, summary: BuildSummary) -> bool:
        return all(parts_intact(o.prefix, o.bin_bytes, o.idx_bytes) for o in summary.outputs.values())

    def prepare(self) -> None:
        """Remove the parts and markers of shards that are not in this plan (left by a run with another shard
        size, worker count or inputs, with keep_shards or killed): they can never be reused by this plan."""
        shards_dir = os.path.join(self.plan.out_dir, SHARDS_DIR)
        if not os.path.isdir(shards_dir):
            return
        planned = {s.name for s in self.plan.shards}
        for entry in os.scandir(shards_dir):
            if entry.name.removesuffix(".done.json") not in planned:
                if entry.is_dir():
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.remove(entry.path)

    def on_failure(self) -> None:
        """Remove shard directories without a marker (half-written by cancelled tasks), and stray temps."""
        shards_dir = os.path.join(self.plan.out_dir, SHARDS_DIR)
        if os.path.isdir(shards_dir):
            for entry in os.scandir(shards_dir):
                if entry.is_dir() and not os.path.exists(f"{entry.path}.done.json"):
                    shutil.rmtree(entry.path, ignore_errors=True)
        super().on_failure()

    def finish(self, summary: BuildSummary) -> None:
        if not self.config.keep_shards:
            shutil.rmtree(os.path.join(self.plan.out_dir, SHARDS_DIR), ignore_errors=True)

    def tokenize(self) -> tuple[list[ShardManifest], list[int]]:
        """Stage 1: every shard without a valid marker, on the placement; (manifests in plan order, the built)."""
        done: Counter[str] = Counter()

        def count(manifest: ShardManifest) -> None:
            done.update(documents=manifest.documents, tokens=manifest.tokens)

        step = functools.partial(tokenize_shard, settings=self.settings)
        return self.first_stage("tokenize", step, count, lambda: {"docs": done["documents"], "tokens": done["tokens"]})

    def refuse_rejects(self, manifests: list[ShardManifest]) -> None:
        """--strict over shards reused from a lenient run, which may hold rejects: the first, at its file line."""
        shards = self.plan.shards
        for shard, m, offset in zip(shards, manifests, file_line_offsets(shards, [m.rows for m in manifests])):
            if any(m.rejects.values()):
                examples = m.reject_examples or [{"path": shard.path, "line": shard.start + 1,
                                                  "reason": next(iter(m.rejects)), "detail": "or later"}]
                reject = Reject(**examples[0])
                raise strict_error(dataclasses.replace(reject, line=reject.line + offset))

    def no_documents(self, manifests: list[ShardManifest]) -> BloomstackError:
        """The one line of a build whose inputs yielded no document (its shards' markers stay: a rerun with
        allow_empty reuses them)."""
        rejects: Counter[str] = Counter()
        for m in manifests:
            rejects.update(m.rejects)
        top = max(rejects.items(), key=lambda item: (item[1], item[0]))[0] if rejects else ""
        detail = next((ex.get("detail", "") for m in manifests for ex in m.reject_examples if ex["reason"] == top), "")
        return no_documents_error([s.path for s in self.plan.shards], rejects, detail)

    def work(self) -> BuildSummary:
        t1 = time.perf_counter()
        manifests, pending = self.tokenize()
        t2 = time.perf_counter()
        if self.config.strict:
            self.refuse_rejects(manifests)
        if not self.config.allow_empty and not any(m.documents for m in manifests):
            raise self.no_documents(manifests)
        out_dir, shards = self.plan.out_dir, self.plan.shards
        outputs = merge_shards(out_dir, shards, manifests, self.names, self.dtype)
        write_rejects(os.path.join(out_dir, REJECTS_FILE), shards, manifests, self.config.max_reject_examples)
        return self.summary(manifests, pending, outputs, t1, t2)

    def summary(self, manifests: list[ShardManifest], pending: list[int], outputs: dict[str, OutputStats],
                t1: float, t2: float) -> BuildSummary:
        """The summary (``tokenize_seconds``: t1 -> t2; merge: t2 -> now)."""
        config, wall = self.config, time.perf_counter() - self.started
        built = [manifests[i] for i in pending]
        rejects = empty_reject_counts()
        for m in manifests:
            for reason, n in m.rejects.items():
                rejects[reason] = rejects.get(reason, 0) + n
        return BuildSummary(
            out_dir=self.plan.out_dir, outputs=outputs,
            documents=sum(o.documents for o in outputs.values()), tokens=sum(o.tokens for o in outputs.values()),
            text_bytes_in=sum(m.text_bytes for m in manifests),
            input_file_bytes=sum({i["shard"]["path"]: i["input"]["size"] for i in self.identities}.values()),
            bytes_out=sum(o.bin_bytes + o.idx_bytes for o in outputs.values()),
            rejects=rejects, rejects_total=sum(rejects.values()),
            rejects_file=os.path.join(self.plan.out_dir, REJECTS_FILE),
            shards=ShardCounts(total=len(manifests), built=len(pending), reused=len(manifests) - len(pending)),
            shard_bytes=self.shard_plan.shard_bytes, unsplittable_inputs=self.shard_plan.unsplittable,
            tokenizer=self.settings.tokenizer_path, tokenizer_sha256=self.tokenizer_sha, dtype=self.dtype.name,
            append_eod=config.append_eod, split_by=config.split_by, workers=self.plan.where.recorded_workers,
            scheduler=config.scheduler, wall_seconds=round(wall, 3),
            tokenize_seconds=round(t2 - t1, 3), merge_seconds=round(self.started + wall - t2, 3),
            shard_cpu_seconds=round(sum(m.cpu_seconds for m in built), 3),
            throughput_mb_s=round(sum(m.text_bytes for m in built) / 1e6 / wall, 3),
            tokens_per_s=round(sum(m.tokens for m in built) / wall, 1),
            fingerprint=self.plan.fingerprint)


def run_build(config: BuildConfig, client: Any = None) -> BuildSummary:
    """Plan, tokenize every unfinished shard in parallel, merge in plan order; returns the summary.

    Everything that can fail on user input (missing input, bad tokenizer path, unwritable output) fails
    before anything is written. ``client``: an existing ``distributed.Client`` to run on (else
    ``config.scheduler`` or a LocalCluster of ``config.workers``).
    """
    return BuildJob(config, client).run()


def dry_run_build(config: BuildConfig) -> JobPreview:
    """What ``run_build(config)`` would do (``--dry-run``): inputs, shards, outputs and their estimated sizes, with
    nothing written and no cluster started (``bloomdata.build.plan`` estimates the sizes)."""
    return BuildJob(config).preview(where_text(config.workers, config.scheduler))
