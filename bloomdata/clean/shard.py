"""Stage 1 of a clean run, one shard: read, normalize, filter, redact, hash; spill candidates and keys.

``filter_shard`` is a pure, idempotent step (``bloomdata.jobs`` places it): it streams
one shard and writes, under ``OUT/work/filter/<shard name>/``:

- ``<name>.jsonl.zst``: the documents that passed the filters, redacted, as ``{"text","lang"}`` lines, one file
  per output name (language), in read order; ``<name>.ids.npy``: their candidate numbers in the shard;
- ``candidates.npy``: uint64[2, n], the line in the input and the UTF-8 size of each candidate;
- ``exact.npy``: uint64[3, n], (high, low, candidate) of the exact-duplicate keys, sorted;
- ``minhash.npy``: uint64[bands, 2, m], per band the (band key, candidate) pairs sorted by key (candidates
  without word units have no signature and are left out);
- ``simhash.npy``: uint64[bands, 3, m], per SimHash band the (band key, candidate, fingerprint) triples sorted
  by key (candidates too short for a window have no fingerprint and are left out);
- ``lines.npy``: uint64[2, L], (hash, candidate) of the candidates' long lines sorted by hash, for template
  removal (``bloomdata.clean.templates``; empty when it is off);
- ``removed.jsonl``: the first ``max_removed_examples`` documents of each reason;

Lines (``candidates.npy``, the ``where`` of ``removed.jsonl``) are the reader's: a byte-range shard numbers
its rows from its own first line, and the run adds the rows of the file's earlier shards when it names them
(``readers.file_line_offsets``; the manifest records ``rows``), so no shard reads the file before its range.

then its marker ``OUT/work/filter/<shard name>.done.json`` (a ``FilterManifest``), last, under a key that
holds everything that determines those bytes (the shard, its input's size and mtime or ETag, every setting of the
steps, the word lists and the models' files). Memory: the hashes of the shard's candidates (~8 bytes per
band + 40 per document) plus one batch of shingles; the documents themselves are streamed.
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
from bloomdata.clean.config import MARKER_VERSION, WORK_DIR, CleanConfig
from bloomdata.clean.minhash import MinHasher, document_key
from bloomdata.clean.parts import LinesWriter, abort, publish, staged
from bloomdata.clean.pii import redact
from bloomdata.clean.quality_filter import QualityFilter
from bloomdata.clean.simhash import SimHasher
from bloomdata.clean.summary import FilterManifest, LangCounts
from bloomdata.clean.templates import LINES_FILE, line_hashes, sorted_lines
from bloomdata.clean.text import word_units
from bloomdata.config_loader import derive
from bloomdata.jobs.runner import strict_error
from bloomdata.readers import Reject, Shard, file_reject, input_stamp, output_name_of, read_shard

STAGE = "filter"
BATCH = 1024  # documents per MinHash batch
STEPS = ("read", "normalize", "filter", "pii", "exact_hash", "minhash", "write")


def filter_dir(out_dir: str) -> str:
    return os.path.join(out_dir, WORK_DIR, STAGE)


def shard_dir(out_dir: str, shard: Shard) -> str:
    return os.path.join(filter_dir(out_dir), shard.name)


def marker_path(out_dir: str, shard: Shard) -> str:
    return os.path.join(filter_dir(out_dir), f"{shard.name}.done.json")


def shard_key(shard: Shard, settings: str) -> dict[str, Any]:
    """Everything that determines a shard's stage-1 files; a marker is valid only for an equal key.

    ``settings``: the content key of ``run.filter_settings`` (the steps' config, word lists, model files),
    computed once by the driver (the word lists are ~1,000 strings)."""
    return {"version": MARKER_VERSION, "shard": dataclasses.asdict(shard), "input": input_stamp(shard.path),
            "settings": settings}


def load_marker(out_dir: str, shard: Shard, key: str) -> FilterManifest | None:
    """The shard's manifest when its marker is valid for ``key`` and its files are there."""
    manifest = durable.read_manifest(marker_path(out_dir, shard), key, FilterManifest)
    if manifest is None:
        return None
    files = ["candidates.npy", "exact.npy", "minhash.npy", "simhash.npy", LINES_FILE, "removed.jsonl"]
    files += [f"{name}{ext}" for name in manifest.languages for ext in (".jsonl.zst", ".ids.npy")]
    work = shard_dir(out_dir, shard)
    if not all(os.path.isfile(os.path.join(work, f)) for f in files):
        return None
    return manifest


class _Examples:
    """The first ``limit`` removed documents of each reason, in read order."""

    def __init__(self, limit: int, max_chars: int):
        self.limit, self.max_chars = limit, max_chars
        self.taken: Counter[str] = Counter()
        self.lines: list[str] = []

    def add(self, reason: str, where: str, lang: str | None, text: str | None = None, detail: str = "") -> None:
        if self.taken[reason] >= self.limit:
            return
        self.taken[reason] += 1
        record: dict[str, Any] = {"reason": reason, "where": where, "lang": lang}
        if text is not None:
            record["text"] = text[:self.max_chars]
            record["truncated"] = len(text) > self.max_chars
        if detail:
            record["detail"] = detail
        self.lines.append(json.dumps(record, ensure_ascii=False))


def filter_shard(shard: Shard, out_dir: str, config: CleanConfig, settings: str,
                 closed: dict[str, list[str]], flagged: dict[str, list[str]]) -> FilterManifest:
    """Stage 1 of one shard (see the module docstring); idempotent: a valid marker is returned as is."""
    t_start, cpu_start = time.perf_counter(), time.process_time()
    identity = shard_key(shard, settings)
    key = durable.content_key(identity)
    manifest = load_marker(out_dir, shard, key)
    if manifest is not None:
        return derive(manifest, reused=True)
    work = shard_dir(out_dir, shard)
    shutil.rmtree(work, ignore_errors=True)  # stray temps or stale files of an earlier attempt
    os.makedirs(work, exist_ok=True)
    state = _ShardFilter(config, closed, flagged, work)
    try:
        state.read(shard)
        state.publish()
    except BaseException:
        state.abort()
        shutil.rmtree(work, ignore_errors=True)  # and the staged temps in it
        raise
    manifest = FilterManifest(
        shard=shard.name, identity=durable.to_jsonable(identity), candidates=len(state.lines), rows=state.rows,
        languages=dict(sorted(state.counts.items())), rejects=dict(sorted(state.rejects.items())),
        examples=len(state.examples.lines), step_seconds={k: round(v, 4) for k, v in state.clock.items()},
        seconds=round(time.perf_counter() - t_start, 3), cpu_seconds=round(time.process_time() - cpu_start, 3))
    # the commit point: written after every file above is published
    durable.write_marker(marker_path(out_dir, shard), key, manifest.model_dump(mode="json", exclude={"reused"}))
    return manifest


class _ShardFilter:
    """One shard's stage 1 in progress: the steps, the counts, and what it keeps of each candidate (a
    document that passed the filters, numbered in read order): its line, size, hashes and redacted text."""

    def __init__(self, config: CleanConfig, closed: dict[str, list[str]], flagged: dict[str, list[str]],
                 work: str):
        self.config, self.work = config, work
        self.quality = QualityFilter(config, closed, flagged)
        self.hasher = MinHasher(config.near_dedup) if config.near_dedup.enabled else None
        self.simhasher = SimHasher(config.simhash) if config.simhash.enabled else None
        self.counts: dict[str, LangCounts] = {}
        self.rejects: Counter[str] = Counter()
        self.examples = _Examples(config.max_removed_examples, config.max_example_chars)
        self.names_of: dict[str | None, str] = {}
        self.clock = dict.fromkeys(STEPS, 0.0)  # seconds per step
        self.rows = 0  # rows read: documents and rejects
        # per candidate: its file line, its UTF-8 size, its number within its output file
        self.lines: list[int] = []
        self.sizes: list[int] = []
        self.writers: dict[str, LinesWriter] = {}
        self.ids: dict[str, list[int]] = {}
        # the dedup keys of the candidates
        self.exact: list[tuple[int, int]] = []
        self.band_keys: list[np.ndarray] = []
        self.batch: list[np.ndarray] = []  # shingles waiting for their MinHash batch
        self.fingerprints: list[int] = []
        self.line_keys: tuple[list[int], list[int]] = ([], [])  # (hash, candidate) of long lines

    def read(self, shard: Shard) -> None:
        clock = self.clock
        t0 = time.perf_counter()
        for item in read_shard(shard):  # a byte-range shard's lines count from its first line
            t1 = time.perf_counter()
            clock["read"] += t1 - t0
            self.rows += 1
            if isinstance(item, Reject):
                if self.config.strict:
                    raise strict_error(file_reject(shard, item))
                self.rejects[item.reason] += 1
                self.examples.add(item.reason, f"{item.path}:{item.line}", None, detail=item.detail)
            else:
                self.document(item.text, item.lang, item.path, item.line)
            t0 = time.perf_counter()
        if self.batch:
            assert self.hasher is not None  # batches are only filled with a hasher
            self.band_keys.append(self.hasher.band_keys(self.batch))
        clock["minhash"] += time.perf_counter() - t0

    def document(self, raw: str, lang: str | None, path: str, line: int) -> None:
        """Normalize and filter one document; a candidate is redacted, hashed and written."""
        clock = self.clock
        t1 = time.perf_counter()
        name = self.names_of.get(lang)
        if name is None:
            name = self.names_of[lang] = output_name_of(lang)
            self.counts[name] = LangCounts()
        c = self.counts[name]
        nbytes = len(raw) if raw.isascii() else len(raw.encode("utf-8"))
        c.documents_in += 1
        c.bytes_in += nbytes
        doc = self.quality.document(raw, lang)
        t2 = time.perf_counter()
        reason = self.quality.reason(doc)
        t3 = time.perf_counter()
        clock["normalize"] += t2 - t1
        clock["filter"] += t3 - t2
        if reason is not None:
            c.remove(reason, nbytes)
            self.examples.add(reason, f"{path}:{line}", lang, raw)
            return
        redaction = redact(doc.text, self.config.pii)
        text = redaction.text
        redacted = any(redaction[1:])
        if redacted:
            c.redacted(redaction)
        clock["pii"] += time.perf_counter() - t3
        # the filters' word units serve MinHash when they are units of this text (default words, no PII)
        self.hash(text, lang, doc.words if not (redacted or doc.language.roots) else None)
        t6 = time.perf_counter()
        self.write(name, text, lang, line)
        c.documents_kept += 1
        c.bytes_kept += self.sizes[-1]
        clock["write"] += time.perf_counter() - t6

    def hash(self, text: str, lang: str | None, words: list[str] | None) -> None:
        """The dedup keys of the next candidate; ``words``: its word units when the filters' apply."""
        config = self.config
        t4 = time.perf_counter()
        if config.exact_dedup.enabled:
            self.exact.append(document_key(text, config.exact_dedup))
        t5 = time.perf_counter()
        if self.hasher is not None:
            self.batch.append(self.hasher.shingles(words if words is not None else word_units(text)))
            if len(self.batch) == BATCH:
                self.band_keys.append(self.hasher.band_keys(self.batch))
                self.batch.clear()
        if self.simhasher is not None:
            self.fingerprints.append(self.simhasher.fingerprint(text, lang))
        if config.template_dedup.enabled:
            found = line_hashes(text, config.template_dedup.min_line_chars)
            self.line_keys[0].extend(found)
            self.line_keys[1].extend([len(self.lines)] * len(found))
        self.clock["exact_hash"] += t5 - t4
        self.clock["minhash"] += time.perf_counter() - t5

    def write(self, name: str, text: str, lang: str | None, line: int) -> None:
        record = json.dumps({"text": text, "lang": lang}, ensure_ascii=False).encode("utf-8") + b"\n"
        writer = self.writers.get(name)
        if writer is None:
            writer = self.writers[name] = LinesWriter(os.path.join(self.work, f"{name}.jsonl.zst"))
            self.ids[name] = []
        self.ids[name].append(len(self.lines))
        writer.write(record)
        self.lines.append(line)
        self.sizes.append(len(text) if text.isascii() else len(text.encode("utf-8")))  # isascii: O(1)

    def publish(self) -> None:
        """Every file of the shard (the module docstring), each published whole."""
        t6 = time.perf_counter()
        n = len(self.lines)
        arrays = {f"{name}.ids.npy": np.array(numbers, dtype=np.uint64) for name, numbers in self.ids.items()}
        arrays["candidates.npy"] = np.array([self.lines, self.sizes], dtype=np.uint64).reshape(2, n)
        arrays["exact.npy"] = _sorted_exact(self.exact)
        arrays["minhash.npy"] = _sorted_bands(self.band_keys, n, self.config, self.hasher)
        arrays["simhash.npy"] = _sorted_simhash(self.fingerprints, self.simhasher)
        arrays[LINES_FILE] = sorted_lines(*self.line_keys)
        others = [staged(os.path.join(self.work, f), functools.partial(np.save, arr=a, allow_pickle=False))
                  for f, a in arrays.items()]
        removed = "".join(f"{line}\n" for line in self.examples.lines).encode("utf-8")
        others.append(staged(os.path.join(self.work, "removed.jsonl"), lambda out: out.write(removed)))
        publish(list(self.writers.values()), others)
        self.clock["write"] += time.perf_counter() - t6

    def abort(self) -> None:
        abort(list(self.writers.values()))


def _sorted_exact(keys: list[tuple[int, int]]) -> np.ndarray:
    """uint64[3, n]: (high, low, candidate), sorted by (high, low, candidate)."""
    table = np.array(keys, dtype=np.uint64).reshape(-1, 2)
    candidates = np.arange(len(table), dtype=np.uint64)
    order = np.lexsort((candidates, table[:, 1], table[:, 0]))
    return np.stack([table[order, 0], table[order, 1], candidates[order]])


def _sorted_simhash(fingerprints: list[int], simhasher: SimHasher | None) -> np.ndarray:
    """uint64[bands, 3, m]: per SimHash band, (key, candidate, fingerprint) sorted by key then candidate;
    candidates without a fingerprint (0: no window) left out."""
    if simhasher is None:
        return np.zeros((0, 3, 0), dtype=np.uint64)
    fp = np.array(fingerprints, dtype=np.uint64)
    have = np.flatnonzero(fp).astype(np.uint64)
    fp = fp[have]
    keys = simhasher.band_keys(fp)
    out = np.empty((len(simhasher.bands), 3, len(have)), dtype=np.uint64)
    for b in range(len(simhasher.bands)):
        order = np.argsort(keys[:, b], kind="stable")
        out[b] = keys[order, b], have[order], fp[order]
    return out


def _sorted_bands(band_keys: list[np.ndarray], n: int, config: CleanConfig, hasher: MinHasher | None) -> np.ndarray:
    """uint64[bands, 2, m]: per band, (key, candidate) sorted by key then candidate; documents without a
    signature (all keys 0, no word units) left out."""
    bands = config.near_dedup.bands if hasher is not None else 0
    if hasher is None or n == 0:
        return np.zeros((bands, 2, 0), dtype=np.uint64)
    keys = np.concatenate(band_keys)
    have = np.flatnonzero(keys.any(axis=1)).astype(np.uint64)
    keys = keys[have]
    out = np.empty((bands, 2, len(have)), dtype=np.uint64)
    for b in range(bands):
        order = np.argsort(keys[:, b], kind="stable")  # stable: ties stay in candidate order
        out[b, 0] = keys[order, b]
        out[b, 1] = have[order]
    return out
