"""Stage 1 of a clean run, one shard: read, then the steps (modifiers, filters, keyers); spill candidates and keys.

``filter_shard`` is a pure, idempotent step (``bloomdata.jobs`` places it): it streams
one shard and writes, under ``OUT/work/filter/<shard name>/``:

- ``<name>.jsonl.zst``: the documents that passed the filters, modified (normalized, redacted, ...), as
  ``{"text","lang"}`` lines, one file per output name (language), in read order; ``<name>.ids.npy``: their
  candidate numbers in the shard;
- ``candidates.npy``: uint64[2, n], the line in the input and the UTF-8 size of each candidate;
- what each keyer that is on writes (``Keyer.files``: ``exact.npy``, ``minhash.npy``, ``simhash.npy``,
  ``lines.npy``, a user keyer's ``<name>.keys.npy``; ``bloomdata.clean.keyers``);
- ``removed.jsonl``: the first ``max_removed_examples`` documents of each reason;

Lines (``candidates.npy``, the ``where`` of ``removed.jsonl``) are the reader's: a byte-range shard numbers
its rows from its own first line, and the run adds the rows of the file's earlier shards when it names them
(``readers.file_line_offsets``; the manifest records ``rows``), so no shard reads the file before its range.

then its marker ``OUT/work/filter/<shard name>.done.json`` (a ``FilterManifest``), last, under a key that
holds everything that determines those bytes (the shard, its input's size and mtime or ETag, every setting of the
steps, the word lists and the models' files). Memory: the keys of the shard's candidates (~8 bytes per
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
from bloomdata.clean.config import CleanConfig
from bloomdata.clean.files import MARKER_VERSION, WORK_DIR
from bloomdata.clean.parts import LinesWriter, abort, publish, staged
from bloomdata.clean.quality_filter import QualityFilter, build_keyers
from bloomdata.clean.steps import Keyer
from bloomdata.clean.summary import FilterManifest, LangCounts
from bloomdata.config_loader import derive
from bloomdata.jobs.runner import strict_error
from bloomdata.readers import Reject, Shard, file_reject, input_stamp, output_name_of, read_shard

STAGE = "filter"
STEPS = ("read", "normalize", "filter", "pii", "exact_hash", "minhash", "write")  # the clocks of step_seconds


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


def load_marker(out_dir: str, shard: Shard, key: str, keyer_files: list[str]) -> FilterManifest | None:
    """The shard's manifest when its marker is valid for ``key`` and its files are there (``keyer_files``:
    those the keyers write, ``Keyer.files``)."""
    manifest = durable.read_manifest(marker_path(out_dir, shard), key, FilterManifest)
    if manifest is None:
        return None
    files = ["candidates.npy", "removed.jsonl", *keyer_files]
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
    keyers = build_keyers(config)
    manifest = load_marker(out_dir, shard, key, [f for keyer in keyers for f in keyer.files()])
    if manifest is not None:
        return derive(manifest, reused=True)
    work = shard_dir(out_dir, shard)
    shutil.rmtree(work, ignore_errors=True)  # stray temps or stale files of an earlier attempt
    os.makedirs(work, exist_ok=True)
    state = _ShardFilter(config, closed, flagged, keyers, work)
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
    document that passed the filters, numbered in read order): its line, size and modified text; the keyers
    keep its keys."""

    def __init__(self, config: CleanConfig, closed: dict[str, list[str]], flagged: dict[str, list[str]],
                 keyers: list[Keyer], work: str):
        self.config, self.work = config, work
        self.quality = QualityFilter(config, closed, flagged)
        self.keyers = keyers
        self.counts: dict[str, LangCounts] = {}
        self.rejects: Counter[str] = Counter()
        self.examples = _Examples(config.max_removed_examples, config.max_example_chars)
        self.names_of: dict[str | None, str] = {}
        self.clock = dict.fromkeys(STEPS, 0.0)  # seconds per step clock
        self.rows = 0  # rows read: documents and rejects
        # per candidate: its file line, its UTF-8 size, its number within its output file
        self.lines: list[int] = []
        self.sizes: list[int] = []
        self.writers: dict[str, LinesWriter] = {}
        self.ids: dict[str, list[int]] = {}

    def read(self, shard: Shard) -> None:
        clock = self.clock
        t0 = time.perf_counter()
        for item in read_shard(shard):  # a byte-range shard's lines count from its first line
            clock["read"] += time.perf_counter() - t0
            self.rows += 1
            if isinstance(item, Reject):
                if self.config.strict:
                    raise strict_error(file_reject(shard, item))
                self.rejects[item.reason] += 1
                self.examples.add(item.reason, f"{item.path}:{item.line}", None, detail=item.detail)
            else:
                self.document(item.text, item.lang, item.path, item.line)
            t0 = time.perf_counter()
        for keyer in self.keyers:
            t0 = time.perf_counter()
            keyer.finish()
            clock[keyer.clock] += time.perf_counter() - t0
        for name, seconds in self.quality.seconds.items():
            clock[name] = clock.get(name, 0.0) + seconds

    def document(self, raw: str, lang: str | None, path: str, line: int) -> None:
        """One document through the steps: removed with its reason, or a candidate, keyed and written."""
        name = self.names_of.get(lang)
        if name is None:
            name = self.names_of[lang] = output_name_of(lang)
            self.counts[name] = LangCounts()
        c = self.counts[name]
        nbytes = len(raw) if raw.isascii() else len(raw.encode("utf-8"))
        c.documents_in += 1
        c.bytes_in += nbytes
        doc = self.quality.process(raw, lang, c)
        if isinstance(doc, str):
            c.remove(doc, nbytes)
            self.examples.add(doc, f"{path}:{line}", lang, raw)
            return
        clock, candidate = self.clock, len(self.lines)
        for keyer in self.keyers:
            start = time.perf_counter()
            keyer.add(doc, candidate)
            clock[keyer.clock] += time.perf_counter() - start
        start = time.perf_counter()
        self.write(name, doc.text, lang, line)
        c.documents_kept += 1
        c.bytes_kept += self.sizes[-1]
        clock["write"] += time.perf_counter() - start

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
        start = time.perf_counter()
        n = len(self.lines)
        arrays = {f"{name}.ids.npy": np.array(numbers, dtype=np.uint64) for name, numbers in self.ids.items()}
        arrays["candidates.npy"] = np.array([self.lines, self.sizes], dtype=np.uint64).reshape(2, n)
        for keyer in self.keyers:
            arrays.update(keyer.arrays())
        others = [staged(os.path.join(self.work, f), functools.partial(np.save, arr=a, allow_pickle=False))
                  for f, a in arrays.items()]
        removed = "".join(f"{line}\n" for line in self.examples.lines).encode("utf-8")
        others.append(staged(os.path.join(self.work, "removed.jsonl"), lambda out: out.write(removed)))
        publish(list(self.writers.values()), others)
        self.clock["write"] += time.perf_counter() - start

    def abort(self) -> None:
        abort(list(self.writers.values()))
