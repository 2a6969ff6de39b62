"""The counts path of tokenizer training: the sample's word counts, counted in parallel, spilled and merged.

The sample is the one ``bloomdata.tokenizer.sampling.draw_sample`` draws (same quotas, same documents), but
no process ever holds its text: workers read their shards, the driver holds keys and sizes only, and the
words are counted where the text is read. ``CountsJob`` is a ``bloomdata.jobs.runner.ShardedJob`` on the
build's placement (a LocalCluster of ``workers``, a scheduler, or in-process with ``workers=0``): the lock,
the sweep of stray temps, the up-to-date check and the summary as the job's marker are the runner's. Every
step is pure and idempotent and leaves a completion marker under ``OUT/word_counts/<stage>/``, keyed by what
determines its files, so a killed run resumes where it stopped:

1. ``scan`` (per shard): every document's language, seeded key, UTF-8 size and row, as uint64[4, n] in
   ``keys/<shard>.npy`` (32 bytes per document), and the bytes of text per language: the sampling's first
   pass, and what its second pass needs (the text is read once before counting, not twice).
2. ``choose`` (driver): the documents under their language's key cutoff (the second pass's pre-filter),
   then per language in key order, equal keys once (equal text), each taken while it fits the quota
   (``sampling.fill``), or the first cut to the quota when none fits: the rows each shard counts, in
   ``chosen/<shard>.npy``. The driver holds one language's candidates at a time.
3. ``count`` (per shard): BLOOM's split (``bloomdata.tokenizer.split``) over the chosen texts; the words are counted
   in compact arrays (``bloomdata.tokenizer.word_counter``) that are written out as a hash-partitioned ``.wc``
   run (``bloomdata.tokenizer.word_counts``) whenever they hold ``spill_words`` words, so a worker's memory is
   bounded whatever its shard holds.
4. ``merge`` (per partition): partition p of every run, equal words summed, in ``merged/part-PPPP.wc``.

The summary ``OUT/word_counts/word_counts.json`` (a ``WordCounts``) is written last, keyed by every shard's
identity and the sampling settings. Memory: a worker holds ``spill_words`` words while counting and one
partition's distinct words while merging; the driver, ~100 bytes per candidate document of one language while
it chooses, and 8 per chosen document.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import time
from array import array
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel

from bloomdata import durable
from bloomdata.errors import BloomstackError
from bloomdata.jobs.placement import Placement
from bloomdata.jobs.runner import JobFiles, JobPlan, ShardedJob
from bloomdata.readers import (
    UNKNOWN_LANG,
    Document,
    Shard,
    SourceConfig,
    empty_inputs_error,
    input_stamp,
    read_shard,
    shard_plan,
)
from bloomdata.tokenizer.sampling import alpha_probabilities, byte_quotas, cutoffs, doc_key, fill, truncate
from bloomdata.tokenizer.split import PIECES
from bloomdata.tokenizer.word_counter import WordCounter, bytes_per_word, new_counter
from bloomdata.tokenizer.word_counts import WordCountsFile, write_partitioned

MARKER_VERSION = 1  # bump when a work file's format changes: every old marker becomes invalid
WORK_NAME = "word_counts"  # OUT/word_counts
SUMMARY_FILE = "word_counts.json"
LOCK_FILE = ".bloomdata-word-counts.lock"
STAGES = ("keys", "chosen", "count", "merged")
PARTITIONS = 64  # hash partitions of every run: a merge task holds ~1/64 of the distinct words
# Spills are sized so that a worker's counter (bloomdata.tokenizer.word_counter.bytes_per_word: ~80 bytes a
# distinct word in C++, ~200 in a dict) stays within half of its share of max_memory.
DEFAULT_SPILL_WORDS = 2_000_000  # without max_memory: ~160 MB per worker (~400 MB with the dict)


class CountingInputs(Protocol):
    """What the counts path reads of a tokenizer config (``bloomdata.tokenizer.bpe.TokenizerTrainConfig``)."""

    sources: list[SourceConfig]
    out_dir: str
    alpha: float
    byte_budget: int
    seed: int
    workers: int
    scheduler: str | None
    shard_bytes: int
    max_memory: int | None
    show_progress: bool
    dashboard: bool


@dataclass(frozen=True)
class CountSettings:
    """What every step needs besides its item: one per run, pickled to every worker."""

    work_dir: str  # absolute
    seed: int
    partitions: int = PARTITIONS
    spill_words: int = DEFAULT_SPILL_WORDS


class WordCounts(BaseModel):
    """``OUT/word_counts/word_counts.json``: the sample drawn and its word counts (the job's marker)."""

    languages: list[str]
    bytes_available: dict[str, int]
    probabilities: dict[str, float]
    bytes_quota: dict[str, int]
    bytes_drawn: dict[str, int]
    docs_drawn: dict[str, int]
    words: int  # distinct words
    word_bytes: int  # UTF-8 bytes of the distinct words (the learner's symbols)
    occurrences: int  # words counted
    partitions: list[str]  # merged files, relative to the work directory
    partition_bytes: list[int]
    shards: int
    shards_counted: int  # counted in this run (the others were reused)
    spills: int  # .wc runs written by the count stage
    spill_words: int
    stage_seconds: dict[str, float]
    wall_seconds: float
    rejects_total: int  # unreadable rows skipped (the runner reads it)
    fingerprint: str
    up_to_date: bool = False


class ScanManifest(BaseModel):
    languages: list[str]  # the language numbers of keys/<shard>.npy
    sizes: dict[str, int]  # language -> UTF-8 bytes of text
    documents: int
    rejects: int


class CountManifest(BaseModel):
    runs: list[str]  # .wc files, relative to the work directory
    words: int  # words over all runs (a word may be in several)
    occurrences: int
    docs: dict[str, int]
    bytes: dict[str, int]  # UTF-8 bytes of the texts counted (after a cut to the quota)


class MergeManifest(BaseModel):
    file: str  # relative to the work directory
    words: int
    word_bytes: int
    occurrences: int
    file_bytes: int


def shard_identity(shard: Shard) -> dict[str, Any]:
    """The shard and its input's size and mtime: a marker is valid only while they are unchanged."""
    return {"version": MARKER_VERSION, "shard": dataclasses.asdict(shard), "input": input_stamp(shard.path)}


def _marker(settings: CountSettings, stage: str, name: str) -> str:
    return os.path.join(settings.work_dir, stage, f"{name}.done.json")


def _done(settings: CountSettings, stage: str, name: str, key: str, manifest: BaseModel) -> None:
    durable.write_marker(_marker(settings, stage, name), key, manifest.model_dump(mode="json"))


# ---------------------------------------------------------------------------------------------------------
# The steps (pure; nothing here knows about Dask)


def scan_shard(item: tuple[Shard, str], settings: CountSettings) -> ScanManifest:
    """Stage 1 of one shard: (language, key, size, row) of every document, and its unreadable rows."""
    shard, key = item
    path = os.path.join(settings.work_dir, "keys", f"{shard.name}.npy")
    found = durable.read_manifest(_marker(settings, "keys", shard.name), key, ScanManifest)
    if found is not None and os.path.isfile(path):  # CountsJob.load_marker's test, on the worker
        return found
    number: dict[str, int] = {}
    sizes: Counter[str] = Counter()
    columns = [array("Q") for _ in range(4)]
    rejects = 0
    for row, doc in enumerate(read_shard(shard)):
        if not isinstance(doc, Document):
            rejects += 1
            continue
        lang = doc.lang or UNKNOWN_LANG
        size = len(doc.text.encode("utf-8"))
        sizes[lang] += size
        for column, value in zip(columns, (number.setdefault(lang, len(number)), doc_key(settings.seed, doc.text),
                                           size, row)):
            column.append(value)
    table = np.array([np.frombuffer(c, dtype=np.uint64) for c in columns]).reshape(4, -1)
    durable.write_with(path, functools.partial(np.save, arr=table, allow_pickle=False))
    manifest = ScanManifest(languages=list(number), sizes=dict(sorted(sizes.items())), documents=table.shape[1],
                            rejects=rejects)
    _done(settings, "keys", shard.name, key, manifest)
    return manifest


def count_shard(item: tuple[Shard, str, dict[int, int]], settings: CountSettings) -> CountManifest:
    """Stage 4 of one shard: the words of its chosen rows (``cut``: row -> bytes to keep of a text cut to
    its language's quota), in hash-partitioned runs of at most ``spill_words`` words each."""
    shard, key, cut = item
    found = durable.read_manifest(_marker(settings, "count", shard.name), key, CountManifest)
    if found is not None and all(os.path.isfile(os.path.join(settings.work_dir, r)) for r in found.runs):
        return found
    folder = os.path.join(settings.work_dir, "count", shard.name)
    shutil.rmtree(folder, ignore_errors=True)  # runs of an earlier attempt
    os.makedirs(folder, exist_ok=True)
    chosen = np.load(os.path.join(settings.work_dir, "chosen", f"{shard.name}.npy")).tolist()
    counter = new_counter()
    runs: list[str] = []
    docs: Counter[str] = Counter()
    text_bytes: Counter[str] = Counter()
    words = occurrences = 0
    at = 0  # next chosen row
    for row, doc in enumerate(read_shard(shard)):
        if at == len(chosen):
            break
        if row != chosen[at]:
            continue
        at += 1
        assert isinstance(doc, Document), f"{shard.path}: chosen row {row} is not a document"
        text = doc.text if row not in cut else truncate(doc.text, cut[row])
        lang = doc.lang or UNKNOWN_LANG
        docs[lang] += 1
        text_bytes[lang] += len(text.encode("utf-8"))
        occurrences += counter.count_text(text)
        if len(counter) >= settings.spill_words:
            words += _spill(counter, folder, runs, settings)
    if counter:
        words += _spill(counter, folder, runs, settings)
    manifest = CountManifest(runs=[os.path.relpath(r, settings.work_dir) for r in runs], words=words,
                             occurrences=occurrences, docs=dict(sorted(docs.items())),
                             bytes=dict(sorted(text_bytes.items())))
    _done(settings, "count", shard.name, key, manifest)
    return manifest


def _spill(counter: WordCounter, folder: str, runs: list[str], settings: CountSettings) -> int:
    """Write the counted words as the next run (the counter is emptied first); returns the words written."""
    path = os.path.join(folder, f"run-{len(runs):04d}.wc")
    n = write_partitioned(path, counter.take(settings.partitions))
    runs.append(path)
    return n


def merge_partition(item: tuple[int, list[str], str], settings: CountSettings) -> MergeManifest:
    """Stage 5 of one partition: its words in every run, equal words summed, as ``merged/part-PPPP.wc``."""
    p, runs, key = item
    name = f"part-{p:04d}"
    file = os.path.join("merged", f"{name}.wc")
    path = os.path.join(settings.work_dir, file)
    found = durable.read_manifest(_marker(settings, "merged", name), key, MergeManifest)
    if found is not None and os.path.isfile(path) and os.path.getsize(path) == found.file_bytes:
        return found
    counter = new_counter()
    for run in runs:
        counter.add(WordCountsFile(os.path.join(settings.work_dir, run)).partition(p))
    total = counter.take(1)  # equal words summed, in the order first seen
    write_partitioned(path, total)
    manifest = MergeManifest(file=file, words=len(total), word_bytes=int(total.lengths.sum(dtype=np.uint64)),
                             occurrences=int(total.counts.sum(dtype=np.uint64)), file_bytes=os.path.getsize(path))
    _done(settings, "merged", name, key, manifest)
    return manifest


# ---------------------------------------------------------------------------------------------------------
# The driver: choose the sample's rows from the candidates (what draw_sample keeps, by key and size only)


@dataclass
class Chosen:
    """The sample as rows: per shard (plan order) its chosen rows, ascending, and the texts cut to a quota."""

    rows: list[np.ndarray]  # uint64 rows per shard
    cut: list[dict[int, int]]  # per shard: row -> UTF-8 bytes kept


def _language_candidates(keys_path: str, languages: list[str], lang: str, cut: int) -> np.ndarray:
    """uint64[3, k]: (key, size, row) of one shard's documents of ``lang`` whose key is under ``cut`` (a cut of
    2**64 keeps every key). The keys file is memory-mapped: only its language row is read whole."""
    table = np.load(keys_path, mmap_mode="r")
    take = table[0] == languages.index(lang)
    if cut < 2**64:
        take &= table[1] < np.uint64(cut)
    return np.asarray(table[1:4, take])


def choose(work_dir: str, shards: list[Shard], scans: list[ScanManifest], cut: dict[str, int],
           quotas: dict[str, int]) -> Chosen:
    """Per language, the candidates (``keys/<shard>.npy`` rows under the language's key cutoff) in key order
    with equal keys once (the first in plan order: equal keys are equal texts), taken by ``sampling.fill``;
    when none fits, the first is cut to the quota. One language's candidates are in memory at a time."""
    picked: list[list[np.ndarray]] = [[] for _ in shards]
    chosen_cut: list[dict[int, int]] = [{} for _ in shards]
    for lang, quota in quotas.items():
        parts = [(s, _language_candidates(os.path.join(work_dir, "keys", f"{shard.name}.npy"), scan.languages, lang,
                                          cut[lang]))
                 for s, (shard, scan) in enumerate(zip(shards, scans)) if lang in scan.languages]
        if not parts:
            continue
        keys, sizes, rows = (np.concatenate([t[i] for _, t in parts]) for i in (0, 1, 2))
        shard = np.concatenate([np.full(t.shape[1], s, dtype=np.uint64) for s, t in parts])
        del parts
        order = np.lexsort((rows, shard, keys))
        keys, sizes, rows, shard = keys[order], sizes[order], rows[order], shard[order]
        first = np.concatenate([[True], keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, bool)
        sizes, rows, shard = sizes[first], rows[first], shard[first]
        taken = np.array(fill(sizes.tolist(), quota), dtype=np.int64)
        if not len(taken) and len(rows) and quota > 0:
            taken = np.zeros(1, dtype=np.int64)
            chosen_cut[int(shard[0])][int(rows[0])] = quota
        for s in np.unique(shard[taken]).tolist():
            picked[s].append(rows[taken][shard[taken] == s])
    rows_per_shard = [np.sort(np.concatenate(p)) if p else np.zeros(0, np.uint64) for p in picked]
    return Chosen(rows_per_shard, chosen_cut)


def spill_words(max_memory: int | None, workers: int) -> int:
    """Distinct words a counting worker holds before it spills: half of its share of ``max_memory`` (the
    driver and every worker take equal shares) over the counter's bytes per word."""
    if max_memory is None:
        return DEFAULT_SPILL_WORDS
    return max(1_000, max_memory // (max(workers, 1) + 1) // 2 // bytes_per_word())


class CountsJob(ShardedJob[WordCounts, ScanManifest]):
    """The counts path's passes over the inputs as one durable sharded job (module docstring)."""

    files = JobFiles(writer="tokenizer word count", lock=LOCK_FILE, summary=SUMMARY_FILE, marked="shards")
    summary_type = WordCounts

    def __init__(self, config: CountingInputs, client: Any = None) -> None:
        self.started = time.perf_counter()
        self.config = config
        plan = shard_plan(config.sources, None, shard_bytes=config.shard_bytes, workers=config.workers or None)
        if not plan.shards:
            raise BloomstackError("no input files found; check the paths of sources", keys=["sources"])
        work = os.path.abspath(os.path.join(config.out_dir, WORK_NAME))
        self.settings = CountSettings(work, config.seed, spill_words=spill_words(config.max_memory, config.workers))
        keys = [durable.content_key([shard_identity(s), config.seed]) for s in plan.shards]  # the scan's keys
        fingerprint = durable.content_key([MARKER_VERSION, keys, config.seed, config.alpha, config.byte_budget,
                                           PIECES.pattern, PARTITIONS])
        where = Placement(config.workers, config.scheduler, client, config.show_progress, config.dashboard)
        super().__init__(JobPlan(work, plan.shards, keys, fingerprint, where))
        self.stage_seconds: dict[str, float] = {}

    def intact(self, summary: WordCounts) -> bool:
        return all(os.path.isfile(p := os.path.join(self.plan.out_dir, f)) and os.path.getsize(p) == n
                   for f, n in zip(summary.partitions, summary.partition_bytes))

    def load_marker(self, shard: Shard, key: str) -> ScanManifest | None:
        """The scan's manifest (the first stage) when its marker and its keys file are there."""
        if not os.path.isfile(os.path.join(self.settings.work_dir, "keys", f"{shard.name}.npy")):
            return None
        return durable.read_manifest(_marker(self.settings, "keys", shard.name), key, ScanManifest)

    def marked(self) -> int:
        """Shards counted (the last per-shard stage): what a rerun no longer reads."""
        return sum(os.path.isfile(_marker(self.settings, "count", s.name)) for s in self.plan.shards)

    def prepare(self) -> None:
        """Remove what another plan left: the per-shard files and markers of shards that are not in this plan."""
        planned = {s.name for s in self.plan.shards}
        for stage in STAGES[:-1]:
            folder = os.path.join(self.plan.out_dir, stage)
            for entry in os.scandir(folder) if os.path.isdir(folder) else []:
                if entry.name.removesuffix(".done.json").removesuffix(".npy") in planned:
                    continue
                if entry.is_dir():
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.remove(entry.path)

    def _stage(self, name: str, step: Any, items: list[Any]) -> list[Any]:
        t0 = time.perf_counter()
        results = self.plan.where.map(name, functools.partial(step, settings=self.settings), items)
        self.stage_seconds[name] = round(time.perf_counter() - t0, 3)
        return results

    def work(self) -> WordCounts:
        shards, config = self.plan.shards, self.config
        for stage in STAGES:
            os.makedirs(os.path.join(self.plan.out_dir, stage), exist_ok=True)
        scans = self._stage("scan", scan_shard, list(zip(shards, self.plan.keys)))
        sizes: Counter[str] = Counter()
        for m in scans:
            sizes.update(m.sizes)
        if not sizes:
            raise empty_inputs_error(config.sources)
        quotas = byte_quotas(dict(sizes), config.alpha, config.byte_budget)
        t0 = time.perf_counter()
        chosen = choose(self.plan.out_dir, shards, scans, cutoffs(dict(sizes), quotas), quotas)
        count_keys = [self._write_chosen(s, k, rows, c)
                      for s, k, rows, c in zip(shards, self.plan.keys, chosen.rows, chosen.cut)]
        self.stage_seconds["choose"] = round(time.perf_counter() - t0, 3)
        pending = sum(durable.read_marker(_marker(self.settings, "count", s.name), k) is None
                      for s, k in zip(shards, count_keys))
        counted = self._stage("count", count_shard, [(s, k, c) for s, k, c in zip(shards, count_keys, chosen.cut)])
        runs = [r for m in counted for r in m.runs]
        merge_key = durable.content_key([MARKER_VERSION, count_keys])
        merged = self._stage("merge", merge_partition, [(p, runs, durable.content_key([merge_key, p]))
                                                       for p in range(PARTITIONS)])
        return self._summary(dict(sizes), quotas, scans, counted, merged, pending)

    def _write_chosen(self, shard: Shard, key: str, rows: np.ndarray, cut: dict[int, int]) -> str:
        """``chosen/<shard>.npy`` (its rows, ascending); returns the key of the shard's count step."""
        data = np.ascontiguousarray(rows, dtype=np.uint64)
        durable.write_with(os.path.join(self.plan.out_dir, "chosen", f"{shard.name}.npy"),
                           functools.partial(np.save, arr=data, allow_pickle=False))
        return durable.content_key([key, durable.digest(data.tobytes()), sorted(cut.items()), PIECES.pattern,
                                    self.settings.partitions])

    def _summary(self, sizes: dict[str, int], quotas: dict[str, int], scans: list[ScanManifest],
                 counted: list[CountManifest], merged: list[MergeManifest], pending: int) -> WordCounts:
        drawn: Counter[str] = Counter()
        docs: Counter[str] = Counter()
        for m in counted:
            drawn.update(m.bytes)
            docs.update(m.docs)
        return WordCounts(
            languages=sorted(sizes), bytes_available=dict(sorted(sizes.items())),
            probabilities={k: round(v, 6) for k, v in alpha_probabilities(sizes, self.config.alpha).items()},
            bytes_quota=quotas, bytes_drawn={lang: drawn.get(lang, 0) for lang in quotas},
            docs_drawn={lang: docs.get(lang, 0) for lang in quotas},
            words=sum(m.words for m in merged), word_bytes=sum(m.word_bytes for m in merged),
            occurrences=sum(m.occurrences for m in merged), partitions=[m.file for m in merged],
            partition_bytes=[m.file_bytes for m in merged], shards=len(self.plan.shards), shards_counted=pending,
            spills=sum(len(m.runs) for m in counted), spill_words=self.settings.spill_words,
            stage_seconds=self.stage_seconds, wall_seconds=round(time.perf_counter() - self.started, 3),
            rejects_total=sum(m.rejects for m in scans), fingerprint=self.plan.fingerprint)


def count_words(config: CountingInputs, client: Any = None) -> WordCounts:
    """Draw the sample and count its words (module docstring); returns the summary, which names the merged
    partition files under ``OUT/word_counts``."""
    return CountsJob(config, client).run()
