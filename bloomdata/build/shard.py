"""One shard of a build: its key, its completion marker and the step that tokenizes it.

A shard is done when ``OUT_DIR/shards/<shard name>.done.json`` exists, records the same *key*
(``durable.content_key`` of the shard identity, input size + mtime (a remote one's ETag), tokenizer sha256,
append_eod, dtype, output naming) and the part files it lists exist with the recorded sizes. The marker (a
``ShardManifest``) is written with ``durable.write_marker`` only after the parts are published, so a killed worker or
build never leaves a half-written shard that looks complete; a changed input or tokenizer changes the key and the shard
is rebuilt, never reused. ``tokenize_shard`` is a pure step: nothing here knows about Dask (``bloomdata.jobs`` places
it).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from bloomdata import durable
from bloomdata.build.config import MARKER_VERSION, SHARDS_DIR
from bloomdata.build.summary import PartStats, ShardManifest
from bloomdata.config_loader import derive
from bloomdata.jobs.runner import strict_error
from bloomdata.megatron.indexed import IndexedDatasetWriter, data_file_path, index_file_path
from bloomdata.readers import Reject, Shard, file_reject, input_stamp, output_name_of, read_shard
from bloomdata.tokenizer.bpe import eod_id, tokenizer_identity
from bloomdata.tokenizer.encoder import TextEncoder, load_encoder


@dataclass(frozen=True)
class ShardSettings:
    """What a build's shard step needs besides the shard: one per build, pickled to every worker."""

    tokenizer_path: str  # absolute: workers may run elsewhere
    out_dir: str  # absolute
    append_eod: bool
    dtype: str  # numpy dtype name of the token ids
    eod_token: str = "</s>"  # what append_eod appends
    split_by: str = "lang"  # one output per document language, or "none": all in output_name
    output_name: str = "all"
    strict: bool = False  # the first rejected row is an error
    batch_docs: int = 1000  # documents per encode_batch call
    batch_bytes: int = 8 << 20  # characters per encode_batch call
    max_examples: int = 20  # reject examples kept per reason
    encoder: str = "auto"  # bloomdata.tokenizer.encoder.load_encoder's kind (the ids are the same either way)


def shard_key(shard: Shard, tokenizer_sha: str | None, settings: ShardSettings) -> dict[str, Any]:
    """Everything that determines a shard's output bytes; a marker is valid only for an equal key."""
    return {
        "version": MARKER_VERSION,
        "shard": dataclasses.asdict(shard),
        "input": input_stamp(shard.path),  # size + mtime; a remote object's size, ETag, last-modified
        "tokenizer_sha256": tokenizer_sha,
        "append_eod": settings.append_eod,
        **({"eod_token": settings.eod_token} if settings.append_eod and settings.eod_token != "</s>" else {}),
        "dtype": np.dtype(settings.dtype).name,
        "split_by": settings.split_by,
        "output_name": settings.output_name if settings.split_by == "none" else None,
    }


def marker_path(out_dir: str, shard: Shard) -> str:
    return os.path.join(out_dir, SHARDS_DIR, f"{shard.name}.done.json")


def part_prefix(out_dir: str, shard: Shard, name: str) -> str:
    return os.path.join(out_dir, SHARDS_DIR, shard.name, name)


def parts_intact(prefix: str, bin_bytes: int, idx_bytes: int) -> bool:
    """``prefix.bin/.idx`` exist with the recorded sizes (what a marker or summary vouches for)."""
    return all(os.path.isfile(path) and os.path.getsize(path) == size
               for path, size in ((data_file_path(prefix), bin_bytes), (index_file_path(prefix), idx_bytes)))


def load_marker(out_dir: str, shard: Shard, key: str) -> ShardManifest | None:
    """The shard's manifest when its marker is valid for ``key`` (``durable.content_key(shard_key(...))``)
    and its parts are intact, else None."""
    manifest = durable.read_manifest(marker_path(out_dir, shard), key, ShardManifest)
    if manifest is None:
        return None
    for name, part in manifest.outputs.items():
        if not parts_intact(part_prefix(out_dir, shard, name), part.bin_bytes, part.idx_bytes):
            return None
    return manifest


@functools.lru_cache(maxsize=4)
def _cached_encoder(path: str, size: int, mtime_ns: int, kind: str) -> tuple[TextEncoder, str]:
    """(encoder, tokenizer sha256) loaded once per worker process (its word cache then serves every shard the
    worker takes); the stat in the key reloads a changed file."""
    return load_encoder(path, kind), tokenizer_identity(path)  # type: ignore[arg-type]


def _encoder(path: str, kind: str) -> tuple[TextEncoder, str | None]:
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    try:
        st = os.stat(file)
    except OSError:
        return load_encoder(path, kind), None  # type: ignore[arg-type]  # raises the error naming the path
    return _cached_encoder(file, st.st_size, st.st_mtime_ns, kind)


class _Parts:
    """The shard's part writers, one per output name, fed in batches through the encoder's ``encode_flat``.

    The per-document work runs ~10^4-10^5 times a second per worker: kept to the bare minimum (no per-document
    regex, encode or dict churn; a run of documents for one output is written in one call) since it is what
    separates us from bare encoding."""

    def __init__(self, shard: Shard, settings: ShardSettings, encoder: TextEncoder) -> None:
        self.shard, self.settings, self.encoder = shard, settings, encoder
        self.dtype = np.dtype(settings.dtype)
        self.eod = eod_id(encoder, settings.eod_token) if settings.append_eod else None
        self.writers: dict[str, IndexedDatasetWriter] = {}
        self.tokens: Counter[str] = Counter()
        self.text_bytes = 0
        self.names: list[str] = []
        self.texts: list[str] = []
        self.chars = 0

    def add(self, name: str, text: str) -> None:
        self.names.append(name)
        self.texts.append(text)
        self.chars += len(text)
        if len(self.texts) >= self.settings.batch_docs or self.chars >= self.settings.batch_bytes:
            self.flush()

    def flush(self) -> None:
        ids, offsets = self.encoder.encode_flat(self.texts, append=self.eod)
        self.text_bytes += len("".join(self.texts).encode("utf-8"))
        names, lo = self.names, 0
        while lo < len(names):  # runs of documents for one output name
            hi = lo + 1
            while hi < len(names) and names[hi] == names[lo]:
                hi += 1
            self._writer(names[lo]).add_flat(ids[offsets[lo]:offsets[hi]], np.diff(offsets[lo:hi + 1]))
            self.tokens[names[lo]] += int(offsets[hi] - offsets[lo])
            lo = hi
        self.names.clear()
        self.texts.clear()
        self.chars = 0

    def _writer(self, name: str) -> IndexedDatasetWriter:
        writer = self.writers.get(name)
        if writer is None:
            prefix = part_prefix(self.settings.out_dir, self.shard, name)
            writer = self.writers[name] = IndexedDatasetWriter(prefix, self.dtype)
        return writer

    def finalize(self) -> dict[str, PartStats]:
        if self.texts:
            self.flush()
        for writer in self.writers.values():
            writer.finalize()
        stats = {}
        for name in sorted(self.writers):
            prefix = part_prefix(self.settings.out_dir, self.shard, name)
            stats[name] = PartStats(documents=len(self.writers[name]), tokens=self.tokens[name],
                                    bin_bytes=os.path.getsize(data_file_path(prefix)),
                                    idx_bytes=os.path.getsize(index_file_path(prefix)))
        return stats

    def abort(self) -> None:
        for writer in self.writers.values():
            writer.abort()


@dataclass
class _Rejects:
    """A shard's rejected rows: counts per reason and the first ``limit`` of each (--strict: the first raises)."""

    shard: Shard
    strict: bool
    limit: int
    counts: Counter[str] = dataclasses.field(default_factory=Counter)
    examples: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def add(self, reject: Reject) -> None:
        if self.strict:
            raise strict_error(file_reject(self.shard, reject))
        self.counts[reject.reason] += 1
        if self.counts[reject.reason] <= self.limit:
            self.examples.append(dataclasses.asdict(reject))


def _tokenize_rows(shard: Shard, parts: _Parts, rejects: _Rejects) -> int:
    """Stream the shard's rows into ``parts``; returns the rows read (documents and rejects)."""
    split_by, output_name = parts.settings.split_by, parts.settings.output_name
    names_of: dict[str | None, str] = {}  # document lang -> output name, sanitized once per language
    rows = 0
    for item in read_shard(shard):
        rows += 1
        if isinstance(item, Reject):
            rejects.add(item)
            continue
        if split_by == "none":
            name = output_name
        else:
            found = names_of.get(item.lang)
            if found is None:
                found = names_of[item.lang] = output_name_of(item.lang)
            name = found
        parts.add(name, item.text)
    return rows


def tokenize_shard(shard: Shard, settings: ShardSettings) -> ShardManifest:
    """Tokenize one shard into ``OUT_DIR/shards/<shard>/<name>.bin/.idx`` and mark it done.

    Idempotent: a shard with a valid marker is not redone (Dask may re-run a task whose worker died).
    Memory is bounded by one batch (``batch_docs`` documents or ``batch_bytes`` characters) plus the
    writers' 4 bytes per document. Returns the manifest (small: counts, sizes, bounded reject examples).
    """
    t0, cpu0 = time.perf_counter(), time.process_time()
    encoder, sha = _encoder(settings.tokenizer_path, settings.encoder)
    identity = shard_key(shard, sha, settings)
    key = durable.content_key(identity)
    manifest = load_marker(settings.out_dir, shard, key)
    if manifest is not None:
        return derive(manifest, reused=True)
    work = os.path.join(settings.out_dir, SHARDS_DIR, shard.name)
    shutil.rmtree(work, ignore_errors=True)  # stray temp files or stale parts of an earlier attempt
    os.makedirs(work, exist_ok=True)
    parts = _Parts(shard, settings, encoder)
    rejects = _Rejects(shard, settings.strict, settings.max_examples)
    try:
        rows = _tokenize_rows(shard, parts, rejects)
        outputs = parts.finalize()
    except BaseException:
        parts.abort()
        shutil.rmtree(work, ignore_errors=True)
        raise
    manifest = ShardManifest(
        shard=shard.name, identity=durable.to_jsonable(identity), outputs=outputs, rows=rows,
        text_bytes=parts.text_bytes, documents=sum(o.documents for o in outputs.values()),
        tokens=sum(o.tokens for o in outputs.values()), rejects=dict(sorted(rejects.counts.items())),
        reject_examples=rejects.examples, seconds=round(time.perf_counter() - t0, 3),
        cpu_seconds=round(time.process_time() - cpu0, 3))
    # the commit point: written after every part file is published (and fsynced by its writer)
    durable.write_marker(marker_path(settings.out_dir, shard), key,
                         manifest.model_dump(mode="json", exclude={"reused"}))
    return manifest
