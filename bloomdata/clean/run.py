"""``run_clean``: plan, filter shards, join keys per band, resolve duplicates, write shards, report.

Design (datatrove's split between steps and executors, and its MinHash stages; the build's shard model):

1. ``plan_job`` cuts the inputs into a deterministic list of shards as the build does: a large file by size into
   about 4 shards per worker (jsonl byte ranges, parquet row groups, arrow record batches), or into row ranges
   with ``max_rows_per_shard``; the outputs do not depend on the plan.
2. ``filter_shard`` (``bloomdata.clean.shard``) per shard on Dask: read, normalize, filter, redact; spill the
   candidates, their exact keys and MinHash band keys, each sorted, to ``OUT/work/filter/<shard>/``.
3. ``join`` (``bloomdata.clean.dedup``) per key range of each band on Dask: (duplicate, first) pairs.
4. ``resolve`` in the driver: duplicate clusters; the first document in plan order survives.
5. ``write_shard`` (``bloomdata.clean.write``) per shard on Dask: ``OUT/data/<lang>/<index>-<shard>.jsonl.zst``.
6. ``OUT/removed.jsonl.zst`` (examples per reason), ``clean.md``, ``clean.png``, then ``clean_summary.json``
   last: the run's marker, whose key (``fingerprint``) is the content key of every shard key and the
   output settings, so an unchanged rerun does nothing.

``CleanJob`` is a ``bloomdata.jobs.runner.ShardedJob``: the lock, the sweeps of stray temps, the up-to-date
check, the "output holds an input" check and the summary as the run's marker are the runner's, shared
with ``bloomdata build``. Stages 2, 3 and 5 run on one Dask client (``Placement``): the caller's, or one
opened for the whole run. Every task writes its files, then a completion marker keyed by everything that
determines them (``bloomdata.durable``), so a killed run resumes where it stopped and produces the same
bytes. Outputs depend only on the plan (global ids are plan positions; joins sort by them; parts are named
by plan index), never on the number of workers or the order tasks finish. The work directory is removed
at the end unless ``keep_work``.
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
from bloomdata.clean import dedup, templates, write
from bloomdata.clean.config import CleanConfig, dedup_reasons, removal_reasons, shard_settings
from bloomdata.clean.files import (
    DATA_DIR,
    LOCK_FILE,
    REMOVED_FILE,
    REPORT_MD,
    REPORT_PNG,
    SUMMARY_FILE,
    WORK_DIR,
)
from bloomdata.clean.lang_models import check_models, model_identity
from bloomdata.clean.language import load_word_lists
from bloomdata.clean.plan import part_estimates
from bloomdata.clean.quality_filter import build_keyers
from bloomdata.clean.report import write_report
from bloomdata.clean.shard import STEPS, filter_shard, load_marker, shard_dir, shard_key
from bloomdata.clean.steps import Keyer
from bloomdata.clean.summary import (
    CleanSummary,
    FilterManifest,
    LangCounts,
    OutputStats,
    ShardCounts,
    WriteManifest,
)
from bloomdata.disk import tree_bytes
from bloomdata.dry_run import PlannedFile, where_text
from bloomdata.errors import BloomstackError
from bloomdata.jobs.placement import Placement
from bloomdata.jobs.runner import JobFiles, JobPlan, JobPreview, ShardedJob, Where, strict_error
from bloomdata.readers import (
    REJECT_REASONS,
    Reject,
    Shard,
    file_line_offsets,
    no_documents_error,
    output_name_of,
    plan_job,
)


def filter_settings(config: CleanConfig, closed: dict[str, list[str]], flagged: dict[str, list[str]]) -> dict[str, Any]:
    """What, besides the shard, determines its stage-1 files (part of every shard key): the whole config but
    the fields marked ``not_in_key`` (opt-out, so a new section is in the key the day it is added), model
    files by identity, and the word lists as read."""
    return {**shard_settings(config, model_identity), "closed_class_words": closed, "flagged_words": flagged}


def _plan_joins(config: CleanConfig, keyers: list[Keyer], candidates: int) -> list[dedup.JoinTask]:
    """Every join task, in a fixed order: each keyer's (the built-in ones: exact ranges, then each MinHash band's
    ranges, then each SimHash band's), each range ``near_dedup.docs_per_task`` documents."""
    parts = max(1, -(-candidates // config.near_dedup.docs_per_task))
    codes = {reason: code for code, reason in enumerate(dedup_reasons(config))}
    return [task for keyer in keyers if keyer.joins for task in keyer.join_tasks(parts, codes[keyer.reason])]


def _join_item(item: tuple[dedup.JoinTask, str], out_dir: str, shard_dirs: list[str], hamming_distance: int):
    return dedup.join(item[0], out_dir, shard_dirs, item[1], hamming_distance)


def _write_item(item: tuple[Shard, int, FilterManifest, str], settings: write.WriteSettings,
                post=None) -> WriteManifest:
    shard, index, filtered, key = item
    return write.write_shard(shard, index, filtered, key, settings, post() if post else None)


def _template_item(item: tuple[dedup.JoinTask, str], **kw):
    return templates.count(item[0], key=item[1], **kw)


def _find_templates(config: CleanConfig, out_dir: str, shards: list[Shard], keys: list[str], removals: list[str],
                    where: Where) -> tuple[str, str]:
    """Stage 3b: the template lines of the run (``bloomdata.clean.templates``): (their file, its digest)."""
    lines = sum(np.load(os.path.join(shard_dir(out_dir, s), templates.LINES_FILE), mmap_mode="r").shape[1]
                for s in shards)
    parts = max(1, -(-lines // config.near_dedup.docs_per_task))
    tasks = [dedup.JoinTask(0, part, parts, "template") for part in range(parts)]
    items = [(task, durable.content_key([dedup.join_key(task, keys), removals, config.template_dedup.min_occurrences]))
             for task in tasks]
    step = functools.partial(_template_item, out_dir=out_dir, shard_dirs=[shard_dir(out_dir, s) for s in shards],
                             removed=[write.resolve_path(out_dir, s) for s in shards],
                             min_occurrences=config.template_dedup.min_occurrences)
    where.map("templates", step, items)
    return templates.gather(out_dir, tasks)


class CleanJob(ShardedJob[CleanSummary, FilterManifest]):
    """One clean run as a durable sharded job (``bloomdata.jobs.runner``): lock, sweeps, up-to-date check and
    summary are the runner's; the stages are here (see the module docstring)."""

    files = JobFiles(writer="clean run", lock=LOCK_FILE, summary=SUMMARY_FILE, marked="shards filtered")
    summary_type = CleanSummary

    def __init__(self, config: CleanConfig, client: Any = None) -> None:
        """Everything that can fail on user input (missing inputs, models or word lists, an output holding an
        input) fails here, before anything is written."""
        self.started = time.perf_counter()
        shard_plan = plan_job(config)
        shards = shard_plan.shards
        if not shards:
            raise BloomstackError("no input files found; check the paths of sources", keys=["sources"])
        self.config = config = check_models(config)
        self.closed, self.flagged = load_word_lists(config.quality)
        self.settings = durable.content_key(filter_settings(config, self.closed, self.flagged))
        keys = [durable.content_key(shard_key(s, self.settings)) for s in shards]
        fingerprint = durable.content_key([keys, config.output_format, config.exact_dedup.enabled,
                                           config.near_dedup.enabled, config.simhash.enabled,
                                           config.template_dedup.model_dump()])
        where = Placement(config.workers, config.scheduler, client, config.progress, config.dashboard)
        super().__init__(JobPlan(os.path.abspath(config.out_dir), shards, keys, fingerprint, where, config.strict,
                                 shard_plan.shard_bytes))
        self.stage_seconds: dict[str, float] = {}  # filter, join, resolve, write, report (wall)
        self.totals = _Totals()
        self.keyers = build_keyers(config)  # for their files and join tasks (each shard builds its own)

    def load_marker(self, shard: Shard, key: str) -> FilterManifest | None:
        return load_marker(self.plan.out_dir, shard, key, [f for keyer in self.keyers for f in keyer.files()])

    def first_stage_bytes(self, shard: Shard, manifest: FilterManifest) -> int:
        return tree_bytes(shard_dir(self.plan.out_dir, shard))

    def planned_outputs(self) -> list[PlannedFile]:
        """Each shard's part per language (``<lang>``: the languages its rows name), at most about the size
        ``bloomdata.clean.plan`` estimates, and the run's own files."""
        fmt, out, shards = self.config.output_format, self.plan.out_dir, self.plan.shards
        parts = [PlannedFile(path=os.path.join(out, write.part_name(output_name_of(s.lang) if s.lang else "<lang>",
                                                                    i, s, fmt)), lang=s.lang, bytes=size)
                 for i, (s, size) in enumerate(zip(shards, part_estimates(shards, fmt)))]
        return [*parts, *(PlannedFile(path=os.path.join(out, name))
                          for name in (REMOVED_FILE, REPORT_MD, REPORT_PNG, SUMMARY_FILE))]

    def intact(self, summary: CleanSummary) -> bool:
        for output in summary.outputs.values():
            paths = [os.path.join(self.plan.out_dir, f) for f in output.files]
            if not all(os.path.isfile(p) for p in paths) or sum(map(os.path.getsize, paths)) != output.file_bytes:
                return False
        return True

    def finish(self, summary: CleanSummary) -> None:
        if not self.config.keep_work:
            shutil.rmtree(os.path.join(self.plan.out_dir, WORK_DIR), ignore_errors=True)

    def filter(self) -> tuple[list[FilterManifest], list[int]]:
        """Stage 1: filter every shard not done yet; (manifests in plan order, the shards filtered now)."""
        t0, out_dir, shards = time.perf_counter(), self.plan.out_dir, self.plan.shards
        step = functools.partial(filter_shard, out_dir=out_dir, config=self.config, settings=self.settings,
                                 closed=self.closed, flagged=self.flagged)
        manifests, pending = self.first_stage("filter", step, count=self.totals.filtered)
        if self.config.strict:  # shards reused from a lenient run may hold rejects that --strict refuses
            _refuse_rejects(out_dir, shards, manifests)
        if not self.config.allow_empty and all(m.rows == sum(m.rejects.values()) for m in manifests):
            rejects: Counter[str] = Counter()
            for m in manifests:
                rejects.update(m.rejects)
            raise no_documents_error([s.path for s in shards], rejects)  # the readers yielded no document
        self.stage_seconds["filter"] = time.perf_counter() - t0
        return manifests, pending

    def deduplicate(self, manifests: list[FilterManifest]) -> tuple[int, list[str], Any]:
        """Stages 2 and 3: join the keys of every band, range by range; which copies go (and template lines);
        returns (join tasks, each shard's removal digest, the write stage's post-processing or None)."""
        config, out_dir, shards, where = self.config, self.plan.out_dir, self.plan.shards, self.plan.where
        t0 = time.perf_counter()
        tasks = _plan_joins(config, self.keyers, sum(m.candidates for m in manifests))
        items = [(task, dedup.join_key(task, self.plan.keys)) for task in tasks]
        join = functools.partial(_join_item, out_dir=out_dir, shard_dirs=[shard_dir(out_dir, s) for s in shards],
                                 hamming_distance=config.simhash.hamming_distance)
        where.map("join", join, items)
        t1 = time.perf_counter()
        self.stage_seconds["join"] = t1 - t0
        removals = dedup.resolve(out_dir, tasks, len(shards))
        os.makedirs(os.path.dirname(write.resolve_path(out_dir, shards[0])), exist_ok=True)
        digests = []
        for shard, removal in zip(shards, removals):
            data = np.ascontiguousarray(removal, dtype=np.uint64)
            durable.write_with(write.resolve_path(out_dir, shard),
                               functools.partial(np.save, arr=data, allow_pickle=False))
            digests.append(durable.digest(data.tobytes()))
        post = None
        if config.template_dedup.enabled:  # stage 3b: template lines, counted over the surviving documents
            templates_path, templates_digest = _find_templates(config, out_dir, shards, self.plan.keys, digests, where)
            digests = [durable.content_key([d, templates_digest]) for d in digests]
            post = functools.partial(write.TemplateRemoval, templates_path, config)
        self.stage_seconds["resolve"] = time.perf_counter() - t1
        return len(tasks), digests, post

    def write(self, manifests: list[FilterManifest], digests: list[str], post: Any) -> list[WriteManifest]:
        """Stage 4: write the kept documents of every shard."""
        config, shards, t0 = self.config, self.plan.shards, time.perf_counter()
        items = [(s, i, m, write.write_key(k, d, i, config.output_format))
                 for i, (s, m, k, d) in enumerate(zip(shards, manifests, self.plan.keys, digests))]
        settings = write.WriteSettings(self.plan.out_dir, config.output_format, config.max_removed_examples,
                                       config.max_example_chars, dedup_reasons(config))
        step = functools.partial(_write_item, settings=settings, post=post)
        written = self.plan.where.map("write", step, items, lambda i, manifest: self.totals.written(manifest))
        self.stage_seconds["write"] = time.perf_counter() - t0
        return written

    def work(self) -> CleanSummary:
        out_dir, shards = self.plan.out_dir, self.plan.shards
        manifests, pending = self.filter()
        join_tasks, digests, post = self.deduplicate(manifests)
        written = self.write(manifests, digests, post)
        t5 = time.perf_counter()
        outputs = _outputs(out_dir, written)
        os.makedirs(os.path.join(out_dir, DATA_DIR), exist_ok=True)  # readable even when nothing was kept
        _remove_stale_parts(out_dir, outputs)
        _write_examples(self.config, out_dir, shards, manifests)
        summary = _summary(self, _Stages(pending, outputs, join_tasks))
        write_report(summary)
        summary.stage_seconds["report"] = round(time.perf_counter() - t5, 3)
        summary.wall_seconds = round(time.perf_counter() - self.started, 3)
        return summary


def run_clean(config: CleanConfig, client: Any = None) -> CleanSummary:
    """Clean ``config.sources`` into ``config.out_dir``; returns the summary (see the module docstring).

    Everything that can fail on user input (missing inputs, models or word lists, an unwritable output)
    fails before anything is written. ``client``: an existing ``distributed.Client`` to run on (else
    ``config.scheduler`` or a LocalCluster of ``config.workers``, one for every stage).
    """
    return CleanJob(config, client).run()


def dry_run_clean(config: CleanConfig) -> JobPreview:
    """What ``run_clean(config)`` would do (``--dry-run``): inputs, shards, outputs and the peak disk space, with
    nothing written and no cluster started."""
    return CleanJob(config).preview(where_text(config.workers, config.scheduler))


def _refuse_rejects(out_dir: str, shards: list[Shard], manifests: list[FilterManifest]) -> None:
    offsets = file_line_offsets(shards, [m.rows for m in manifests])
    for shard, m, offset in zip(shards, manifests, offsets):
        if any(m.rejects.values()):
            with open(os.path.join(shard_dir(out_dir, shard), "removed.jsonl"), encoding="utf-8") as f:
                first = next((r for r in map(json.loads, f) if r["reason"] in REJECT_REASONS), None)
            if first is None:  # no examples kept (max_removed_examples 0): name the shard's first row
                reason = next(r for r in REJECT_REASONS if m.rejects.get(r))
                raise strict_error(Reject(reason, shard.path, shard.start + 1 + offset, "or later"))
            path, _, line = first["where"].rpartition(":")
            raise strict_error(Reject(first["reason"], path, int(line) + offset, first.get("detail", "")))


def _outputs(out_dir: str, written: list[WriteManifest]) -> dict[str, OutputStats]:
    outputs: dict[str, OutputStats] = {}
    for manifest in written:  # plan order
        for name, part in manifest.parts.items():
            o = outputs.setdefault(name, OutputStats(directory=os.path.join(out_dir, DATA_DIR, name), files=[],
                                                     documents=0, bytes=0, file_bytes=0))
            o.files.append(part.file)
            o.documents += part.documents
            o.bytes += part.bytes
            o.file_bytes += part.file_bytes
    return dict(sorted(outputs.items()))


def _remove_stale_parts(out_dir: str, outputs: dict[str, OutputStats]) -> None:
    """Delete what an earlier run with another plan or settings left under OUT/data (this run owns it)."""
    keep = {os.path.join(out_dir, f) for o in outputs.values() for f in o.files}
    data = os.path.join(out_dir, DATA_DIR)
    for root, _, files in os.walk(data, topdown=False):
        for name in files:
            if os.path.join(root, name) not in keep:
                os.unlink(os.path.join(root, name))
        if root != data and not os.listdir(root):
            os.rmdir(root)


def _write_examples(config: CleanConfig, out_dir: str, shards: list[Shard], manifests: list[FilterManifest]) -> None:
    """OUT/removed.jsonl.zst: the first ``max_removed_examples`` examples of each reason in plan order, reasons
    in order, at their file lines (the work files hold each shard's own line numbers)."""
    import zstandard

    limit = config.max_removed_examples
    offsets = file_line_offsets(shards, [m.rows for m in manifests])
    by_reason: dict[str, list[dict]] = {r: [] for r in (*REJECT_REASONS, *removal_reasons(config))}
    for stage in ("filter", "write"):
        for shard, offset in zip(shards, offsets):
            path = os.path.join(out_dir, WORK_DIR, stage, shard.name, "removed.jsonl")
            if not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8") as f:
                for line in f:
                    record = json.loads(line)
                    kept = by_reason.setdefault(record["reason"], [])
                    if len(kept) < limit:
                        where, _, at = record["where"].rpartition(":")
                        record["where"] = f"{where}:{int(at) + offset}"
                        kept.append(record)
    for record in (r for reason in dedup_reasons(config) for r in by_reason[reason]):
        of = record.pop("duplicate_of")
        index = of["shard"]  # the survivor's shard by plan index (write._ShardWriter.remove)
        lines = np.load(os.path.join(shard_dir(out_dir, shards[index]), "candidates.npy"), mmap_mode="r")[0]
        record["duplicate_of"] = f"{shards[index].path}:{int(lines[of['candidate']]) + offsets[index]}"
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for records in by_reason.values() for r in records)
    durable.write_bytes(os.path.join(out_dir, REMOVED_FILE), zstandard.ZstdCompressor(level=3).compress(text.encode()))


_NO_COUNTS = LangCounts()  # what a kept manifest's languages map to once the run's totals hold their counts


@dataclasses.dataclass
class _Totals:
    """The run's per-language counts, rejects and (of the shards filtered now) step seconds and bytes read:
    summed from each filter and write manifest as it arrives, which is then stripped in place to what later
    stages read (rows, candidates, language names, rejects, parts). In place: the executor's list of results
    holds the same object until the stage ends. Every shard's per-language counts, kept to the end, held
    ~37 KB a shard: a 1 GB clean of 1,000 files peaked 91 MB above one of 100 files, in the driver; kept to
    the end of the filter stage, 6.7 MB at 800 files of 9 languages (tracemalloc), 14 KB a shard of 12."""

    languages: dict[str, LangCounts] = dataclasses.field(default_factory=dict)
    rejects: dict[str, int] = dataclasses.field(default_factory=lambda: dict.fromkeys(REJECT_REASONS, 0))
    step_seconds: dict[str, float] = dataclasses.field(default_factory=lambda: dict.fromkeys(STEPS, 0.0))
    bytes_filtered: int = 0  # bytes read by the shards filtered in this run (the throughput's)

    def filtered(self, manifest: FilterManifest) -> None:
        """A shard's filter manifest, reused or filtered now; its counts, identity and step seconds are then
        dropped from it."""
        self._add(manifest.languages)
        for reason, n in manifest.rejects.items():
            self.rejects[reason] = self.rejects.get(reason, 0) + n
        if not manifest.reused:
            for step in STEPS:
                self.step_seconds[step] += manifest.step_seconds.get(step, 0.0)
            self.bytes_filtered += sum(c.bytes_in for c in manifest.languages.values())
        manifest.languages = dict.fromkeys(manifest.languages, _NO_COUNTS)
        manifest.identity, manifest.step_seconds = {}, {}

    def written(self, manifest: WriteManifest) -> None:
        """A shard's duplicates (kept by stage 1, removed by stage 4), as its write manifest arrives; they are
        dropped from it (the manifest is only read for its parts after this)."""
        self._add(manifest.removed)
        manifest.removed = {}

    def _add(self, counts: dict[str, LangCounts]) -> None:
        for name, c in counts.items():
            self.languages.setdefault(name, LangCounts()).add(c)


@dataclasses.dataclass
class _Stages:
    """What the stages of one clean run produced (for its summary); the counts are in ``CleanJob.totals``."""

    pending: list[int]  # the shards filtered in this run (the others were reused)
    outputs: dict[str, OutputStats]
    join_tasks: int


def _languages(totals: _Totals, outputs: dict[str, OutputStats], reasons: tuple[str, ...]) -> dict[str, LangCounts]:
    """Per language: counts after every step (kept = what was written); ``reasons``: the run's, in order."""
    languages = totals.languages
    for name, c in languages.items():
        c.documents_kept = outputs[name].documents if name in outputs else 0
        c.bytes_kept = outputs[name].bytes if name in outputs else 0
        c.removed = {r: c.removed[r] for r in reasons if r in c.removed}
        c.removed_bytes = {r: c.removed_bytes[r] for r in reasons if r in c.removed_bytes}
    return dict(sorted(languages.items()))


def _summary(job: CleanJob, stages: _Stages) -> CleanSummary:
    config, out_dir, outputs = job.config, job.plan.out_dir, stages.outputs
    reasons = removal_reasons(config)
    languages, rejects = _languages(job.totals, outputs, reasons), job.totals.rejects
    built, total = len(stages.pending), len(job.plan.shards)
    wall = time.perf_counter() - job.started
    return CleanSummary(
        out_dir=out_dir, data_dir=os.path.join(out_dir, DATA_DIR), output_format=config.output_format,
        languages=languages, outputs=outputs,
        documents_in=sum(c.documents_in for c in languages.values()),
        documents_kept=sum(o.documents for o in outputs.values()),
        bytes_in=sum(c.bytes_in for c in languages.values()), bytes_kept=sum(o.bytes for o in outputs.values()),
        removed={r: sum(c.removed.get(r, 0) for c in languages.values()) for r in reasons},
        rejects=rejects, rejects_total=sum(rejects.values()),
        emails_redacted=sum(c.emails_redacted for c in languages.values()),
        ips_redacted=sum(c.ips_redacted for c in languages.values()),
        keys_redacted=sum(c.keys_redacted for c in languages.values()),
        users_redacted=sum(c.users_redacted for c in languages.values()),
        removed_file=os.path.join(out_dir, REMOVED_FILE), report_md=os.path.join(out_dir, REPORT_MD),
        report_png=os.path.join(out_dir, REPORT_PNG),
        shards=ShardCounts(total=total, built=built, reused=total - built),
        join_tasks=stages.join_tasks, workers=job.plan.where.recorded_workers,
        scheduler=config.scheduler, wall_seconds=round(wall, 3),
        stage_seconds={k: round(v, 3) for k, v in job.stage_seconds.items()},
        step_seconds={step: round(seconds, 3) for step, seconds in job.totals.step_seconds.items()},
        throughput_mb_s=round(job.totals.bytes_filtered / 1e6 / wall, 3),
        fingerprint=job.plan.fingerprint, settings_name=config.settings_name,
        notes=settings_notes(config, list(languages)))


def settings_notes(config: CleanConfig, languages: list[str]) -> list[str]:
    """What the report states about how the settings applied to these languages (word rules, models off)."""
    notes = []
    if config.quality.words == "roots":
        for lang in languages:
            t = config.quality.thresholds_for(lang)
            if t.sentencepiece_words and lang not in config.sentencepiece.models:
                notes.append(f"{lang}: words are single characters: no sentencepiece model was given "
                             f"(sentencepiece.models.{lang}); ROOTS split {lang} with its {lang}.sp.model")
    if not config.lang_id.model and "lang_id" in config.quality.steps:
        notes.append("language id off: no fastText model was given (lang_id.model)")
    missing = [lang for lang in languages if lang not in config.perplexity.models]
    if "perplexity" in config.quality.steps and missing:
        notes.append(f"perplexity off for {', '.join(missing)}: no KenLM model was given (perplexity.models)")
    return notes
