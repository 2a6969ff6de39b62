"""One shard of a build: its key, its completion marker and the step that tokenizes it.

A shard is done when ``OUT_DIR/shards/<shard name>.done.json`` exists, records the same *key*
(``durable.content_key`` of the shard identity, input size + mtime, tokenizer sha256, append_eod, dtype,
output naming) and the part files it lists exist with the recorded sizes. The marker (a ``ShardManifest``)
is written with ``durable.write_marker`` only after the parts are published, so a killed worker or build
never leaves a half-written shard that looks complete; a changed input or tokenizer changes the key and the
shard is rebuilt, never reused. ``tokenize_shard`` is a pure step: nothing here knows about Dask
(``bloomdata.build.executor`` places it).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import time
from collections import Counter
from typing import Any

import numpy as np

from bloomdata import durable
from bloomdata.build.config import MARKER_VERSION, SHARDS_DIR, output_name_of
from bloomdata.build.summary import PartStats, ShardManifest
from bloomdata.errors import BloomDataError
from bloomdata.megatron.indexed import IndexedDatasetWriter, data_file_path, index_file_path
from bloomdata.readers import Reject, Shard, file_line, read_shard
from bloomdata.tokenizer.bpe import eod_id, load_tokenizer, tokenizer_identity


def shard_key(shard: Shard, tokenizer_sha: str, append_eod: bool, dtype: np.dtype, split_by: str,
              output_name: str) -> dict[str, Any]:
    """Everything that determines a shard's output bytes; a marker is valid only for an equal key."""
    try:
        st = os.stat(shard.path)
    except OSError as exc:
        raise BloomDataError(f"cannot read input {shard.path}: {exc.strerror}") from None
    return {
        "version": MARKER_VERSION,
        "shard": dataclasses.asdict(shard),
        "input": {"size": st.st_size, "mtime_ns": st.st_mtime_ns},
        "tokenizer_sha256": tokenizer_sha,
        "append_eod": append_eod,
        "dtype": np.dtype(dtype).name,
        "split_by": split_by,
        "output_name": output_name if split_by == "none" else None,
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
def _cached_tokenizer(path: str, size: int, mtime_ns: int):
    """(Tokenizer, sha256) loaded once per worker process; the stat in the key reloads a changed file."""
    return load_tokenizer(path), tokenizer_identity(path)


def _tokenizer(path: str):
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    try:
        st = os.stat(file)
    except OSError:
        return load_tokenizer(path), None  # raises the tokenizer module's error naming the path
    return _cached_tokenizer(file, st.st_size, st.st_mtime_ns)


def _strict_error(reject: Reject) -> BloomDataError:
    """--strict's error for a reject whose line is the file's (see ``file_reject``)."""
    return BloomDataError(f"{reject.path}:{reject.line}: {reject.reason} ({reject.detail or 'no detail'}); fix or "
                          "drop that row, or run without --strict to skip and count it")


def file_reject(shard: Shard, reject: Reject) -> Reject:
    """The reject with its file line number: a byte-range shard counts lines from its own first line."""
    return dataclasses.replace(reject, line=file_line(shard, reject.line)) if shard.local_lines else reject


def tokenize_shard(shard: Shard, tokenizer_path: str, out_dir: str, *, append_eod: bool, dtype: str,
                   split_by: str = "lang", output_name: str = "all", strict: bool = False,
                   batch_docs: int = 1000, batch_bytes: int = 8 << 20,
                   max_examples: int = 20) -> ShardManifest:
    """Tokenize one shard into ``OUT_DIR/shards/<shard>/<name>.bin/.idx`` and mark it done.

    Idempotent: a shard with a valid marker is not redone (Dask may re-run a task whose worker died).
    Memory is bounded by one batch (``batch_docs`` documents or ``batch_bytes`` characters) plus the
    writers' 4 bytes per document. Returns the manifest (small: counts, sizes, bounded reject examples).
    """
    t0, cpu0 = time.perf_counter(), time.process_time()
    tok, sha = _tokenizer(tokenizer_path)
    np_dtype = np.dtype(dtype)
    identity = shard_key(shard, sha, append_eod, np_dtype, split_by, output_name)
    key = durable.content_key(identity)
    manifest = load_marker(out_dir, shard, key)
    if manifest is not None:
        return manifest.model_copy(update={"reused": True})
    eod = eod_id(tok) if append_eod else None
    work = os.path.join(out_dir, SHARDS_DIR, shard.name)
    shutil.rmtree(work, ignore_errors=True)  # stray temp files or stale parts of an earlier attempt
    os.makedirs(work, exist_ok=True)
    writers: dict[str, IndexedDatasetWriter] = {}
    rejects: Counter[str] = Counter()
    examples: list[dict[str, Any]] = []
    counts = {"text_bytes": 0, "rows": 0}
    part_tokens: Counter[str] = Counter()
    batch_names: list[str] = []
    batch_texts: list[str] = []
    batch_chars = 0

    # The per-document work below runs ~10^4 times a second per worker: kept to the bare minimum
    # (no per-document regex, encode or dict churn) since it is what separates us from bare encoding.
    def flush() -> None:
        encodings = tok.encode_batch_fast(batch_texts, add_special_tokens=False)
        counts["text_bytes"] += len("".join(batch_texts).encode("utf-8"))
        for name, enc in zip(batch_names, encodings):
            ids = enc.ids
            if eod is not None:
                ids.append(eod)
            writer = writers.get(name)
            if writer is None:
                writer = writers[name] = IndexedDatasetWriter(part_prefix(out_dir, shard, name), np_dtype)
            writer.add_document(np.array(ids, dtype=np_dtype))  # never empty: texts are non-empty
            part_tokens[name] += len(ids)
        batch_names.clear()
        batch_texts.clear()

    names_of: dict[str | None, str] = {}  # document lang -> output name, sanitized once per language

    try:
        for item in read_shard(shard):
            counts["rows"] += 1
            if isinstance(item, Reject):
                if strict:
                    raise _strict_error(file_reject(shard, item))
                rejects[item.reason] += 1
                if rejects[item.reason] <= max_examples:
                    examples.append(dataclasses.asdict(item))
                continue
            if split_by == "none":
                batch_names.append(output_name)
            else:
                name = names_of.get(item.lang)
                if name is None:
                    name = names_of[item.lang] = output_name_of(item.lang)
                batch_names.append(name)
            batch_texts.append(item.text)
            batch_chars += len(item.text)
            if len(batch_texts) >= batch_docs or batch_chars >= batch_bytes:
                flush()
                batch_chars = 0
        if batch_texts:
            flush()
        for writer in writers.values():
            writer.finalize()
    except BaseException:
        for writer in writers.values():
            writer.abort()
        shutil.rmtree(work, ignore_errors=True)
        raise
    outputs = {}
    for name in sorted(writers):
        prefix = part_prefix(out_dir, shard, name)
        outputs[name] = PartStats(documents=len(writers[name]), tokens=part_tokens[name],
                                  bin_bytes=os.path.getsize(data_file_path(prefix)),
                                  idx_bytes=os.path.getsize(index_file_path(prefix)))
    manifest = ShardManifest(
        shard=shard.name, identity=durable.to_jsonable(identity), outputs=outputs, rows=counts["rows"],
        text_bytes=counts["text_bytes"],
        documents=sum(len(w) for w in writers.values()), tokens=sum(part_tokens.values()),
        rejects=dict(sorted(rejects.items())), reject_examples=examples,
        seconds=round(time.perf_counter() - t0, 3), cpu_seconds=round(time.process_time() - cpu0, 3))
    # the commit point: written after every part file is published (and fsynced by its writer)
    durable.write_marker(marker_path(out_dir, shard), key, manifest.model_dump(mode="json", exclude={"reused"}))
    return manifest
