"""Streaming readers: every supported corpus format becomes an iterator of ``Document`` or ``Reject``.

CONTRACT (shared by the tokenizer trainer and the parallel build; owned by the readers' author):

- ``SourceConfig``: where one source's files are and how to read them (pydantic; shared by CLI and flows).
- ``plan_shards(sources, max_rows_per_shard) -> list[Shard]``: a deterministic list of work units: one per
  file, or a row range of a large file. Same inputs -> same list, in the same order (sources in order, each
  source's files sorted by path).
- ``read_shard(shard) -> Iterator[Document | Reject]``: streams one shard with bounded memory, in file order.
  Every row of the shard yields exactly one item: a ``Document`` to tokenize or a ``Reject`` with a reason
  from ``REJECT_REASONS`` and its file:line, so builds can count rejects by reason and write examples.
- ``iter_documents(sources) -> Iterator[Document]``: all documents of all sources (rejects dropped).

Formats (``format="auto"`` picks by suffix; directories are walked and files of unknown suffix skipped):

- jsonl (``.jsonl .ndjson .json``, optionally ``.gz``/``.zst``): one JSON object per line; a row is a line.
- parquet, arrow (IPC *file* or *stream*, told apart by the ``ARROW1`` magic): a row is a table row,
  read in record batches of at most ``BATCH_ROWS`` rows; arrow files are memory-mapped.
- hf: a ``datasets.save_to_disk`` directory (``state.json`` lists Arrow IPC *stream* files, read with
  pyarrow directly, no ``datasets`` import); a ``DatasetDict`` directory expands to its splits.
- txt (optionally ``.gz``/``.zst``): the whole file is one document (row 1).

Row-range sharding (``max_rows_per_shard``) needs row counts, so planning reads metadata (parquet, arrow
file), scans batch headers (arrow stream, memory-mapped: no data copied) or counts newlines (jsonl). For
plain jsonl we chose counting newlines over byte-range shards: one pass at disk speed (>1 GB/s with
``bytes.count``, versus ~2 MB/s for tokenizing the same bytes) gives exact line numbers for rejects, and
the pass records the byte offset of every shard's first line so ``read_shard`` seeks straight to it.
Compressed jsonl cannot seek: a range shard decompresses and skips the lines before it (decompression is
~100x faster than tokenization, so this costs little unless one file is split into thousands of shards).
"""

from __future__ import annotations

import glob
import gzip
import hashlib
import io
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Literal

from pydantic import BaseModel, Field

from bloomdata.errors import BloomDataError

Format = Literal["auto", "jsonl", "parquet", "arrow", "hf", "txt"]

# Why a row was skipped. Keys are stable: they appear in build summaries and rejects files.
REJECT_REASONS = (
    "malformed_json",  # the line is not a JSON object
    "invalid_utf8",  # the bytes are not valid UTF-8
    "missing_text",  # the text field is absent (or null)
    "non_string_text",  # the text field is not a string
    "empty_text",  # the text is empty (no tokens would be written)
)

BATCH_ROWS = 1024  # rows turned into Python objects at a time from parquet/arrow (bounds memory)
_CHUNK = 1 << 20  # bytes per read when counting newlines
_COMPRESSION = (".gz", ".zst", ".zstd")
_SUFFIXES: dict[str, tuple[str, ...]] = {
    "jsonl": (".jsonl", ".ndjson", ".json"),
    "parquet": (".parquet",),
    "arrow": (".arrow", ".ipc", ".feather"),
    "txt": (".txt",),
}


class SourceConfig(BaseModel):
    """One input source: files of one format, one language (from config or from a per-row field)."""

    paths: list[str] = Field(description="files, directories or glob patterns")
    format: Format = "auto"
    text_field: str = "text"
    lang: str | None = Field(default=None, description="language of every document; else read lang_field")
    lang_field: str = "lang"


@dataclass(frozen=True)
class Shard:
    """A unit of work: rows [start, stop) of one file (stop=None: to the end).

    ``format`` is always concrete after ``plan_shards`` (jsonl, parquet, arrow or txt). ``offset`` is the
    byte offset of row ``start`` in an uncompressed jsonl file, recorded by the planner so the reader can
    seek; None means "skip ``start`` rows by reading".
    """

    path: str
    format: Format
    text_field: str
    lang: str | None
    lang_field: str
    start: int = 0
    stop: int | None = None
    offset: int | None = None

    @property
    def name(self) -> str:
        """Stable identifier used for shard outputs and completion markers (filesystem-safe).

        ``<file name>-<start>-<stop|end>-<hash>``: readable, and the hash of every field that changes
        what the shard yields keeps two shards of the same file name (or read two ways) apart.
        """
        key = json.dumps([self.path, self.format, self.text_field, self.lang, self.lang_field,
                          self.start, self.stop])
        digest = hashlib.sha1(key.encode()).hexdigest()[:10]
        base = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(self.path.rstrip("/")))[:60]
        return f"{base}-{self.start}-{'end' if self.stop is None else self.stop}-{digest}"


@dataclass(frozen=True)
class Document:
    text: str
    lang: str | None
    path: str
    line: int  # 1-based row/line number in the file (the document index for txt, parquet, arrow, hf)


@dataclass(frozen=True)
class Reject:
    reason: str  # one of REJECT_REASONS
    path: str
    line: int
    detail: str = ""


# ---------------------------------------------------------------------------------------------------------
# Planning: sources -> sorted files -> shards


def _strip_compression(name: str) -> str:
    for ext in _COMPRESSION:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


def _format_of(path: str) -> str | None:
    """The concrete format implied by a file name, or None when the suffix is unknown."""
    name = path.lower()
    compressed = name != _strip_compression(name)
    name = _strip_compression(name)
    for fmt, suffixes in _SUFFIXES.items():
        if name.endswith(suffixes) and not (compressed and fmt in ("parquet", "arrow")):
            return fmt
    return None


def _hf_files(directory: str) -> list[str]:
    """The Arrow stream files of a ``save_to_disk`` directory (``Dataset`` or ``DatasetDict``)."""
    dict_json = os.path.join(directory, "dataset_dict.json")
    if os.path.isfile(dict_json):
        splits = json.loads(open(dict_json, encoding="utf-8").read())["splits"]
        return [f for split in sorted(splits) for f in _hf_files(os.path.join(directory, split))]
    state_path = os.path.join(directory, "state.json")
    try:
        state = json.loads(open(state_path, encoding="utf-8").read())
        names = [entry["filename"] for entry in state["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BloomDataError(f"{state_path}: not a datasets.save_to_disk state file ({exc}); "
                             "re-save the dataset with Dataset.save_to_disk") from None
    return [os.path.join(directory, n) for n in names]  # state.json order is the dataset's row order


def _is_hf_dir(directory: str) -> bool:
    return any(os.path.isfile(os.path.join(directory, f)) for f in ("state.json", "dataset_dict.json"))


def _walk(directory: str, fmt: str) -> list[tuple[str, str]]:
    """(path, concrete format) of every readable file under a directory, HF datasets expanded."""
    found: list[tuple[str, str]] = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        if _is_hf_dir(root) and fmt in ("auto", "hf"):
            found += [(p, "arrow") for p in _hf_files(root)]
            dirs[:] = []  # an HF directory is one dataset: do not descend into its splits twice
            continue
        for name in sorted(files):
            inferred = _format_of(name)
            if name.startswith(".") or inferred is None or (fmt not in ("auto", "hf") and inferred != fmt):
                continue
            found.append((os.path.join(root, name), inferred))
    return found


def resolve_files(source: SourceConfig) -> list[tuple[str, str]]:
    """(absolute path, concrete format) of every file of a source, sorted by path within each entry."""
    files: list[tuple[str, str]] = []
    for entry in source.paths:
        pattern = os.path.abspath(os.path.expanduser(entry))
        matches = sorted(glob.glob(pattern, recursive=True)) if glob.has_magic(pattern) else [pattern]
        if not matches or not all(os.path.exists(m) for m in matches):
            raise BloomDataError(f"input path not found: {entry} (check the source's paths; globs must match "
                                 "at least one file)")
        for path in matches:
            if os.path.isdir(path):
                found = _walk(path, source.format)
                if not found:
                    raise BloomDataError(f"{entry}: directory holds no readable files (supported: "
                                         ".jsonl[.gz|.zst], .parquet, .arrow, .txt, save_to_disk dirs)")
                files += sorted(found) if not _is_hf_dir(path) else found
                continue
            fmt = source.format if source.format not in ("auto", "hf") else _format_of(path)
            if fmt is None or fmt == "hf":
                raise BloomDataError(f"{path}: unknown file type; name it .jsonl/.parquet/.arrow/.txt or set "
                                     "the source's format")
            files.append((path, fmt))
    return files


try:
    from zstandard import ZstdError as _ZstdError
except ImportError:  # zstandard is a core dependency; this only keeps the module importable without it
    _ZstdError = OSError


class _ZstdRaw(io.RawIOBase):
    """Decompressed bytes of a .zst file (any number of frames) that, unlike zstandard's stream_reader,
    raises EOFError when the file ends inside a frame instead of silently ending early."""

    def __init__(self, path: str):
        import zstandard

        self._fh = open(path, "rb")
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._mid_frame = False  # input fed to the current frame and it has not ended
        self._out, self._at = b"", 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._at >= len(self._out):
            data = self._fh.read(_CHUNK)
            if not data:
                if self._mid_frame:
                    raise EOFError("compressed file ended before the end of a zstd frame")
                return 0
            parts = []
            while data:
                parts.append(self._obj.decompress(data))
                self._mid_frame = not self._obj.eof
                data = b"" if self._mid_frame else self._obj.unused_data
                if not self._mid_frame:
                    self._obj = self._dctx.decompressobj()
            self._out, self._at = b"".join(parts), 0
        n = min(len(buffer), len(self._out) - self._at)
        buffer[:n] = self._out[self._at:self._at + n]
        self._at += n
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


def _open_bytes(path: str) -> IO[bytes]:
    """A buffered binary stream of the file's (decompressed) bytes."""
    try:
        if path.endswith(".gz"):
            return gzip.open(path, "rb")
        if path.endswith((".zst", ".zstd")):
            return io.BufferedReader(_ZstdRaw(path), _CHUNK)
        return open(path, "rb", buffering=_CHUNK)
    except OSError as exc:
        raise BloomDataError(f"cannot read input {path}: {exc.strerror or exc}") from None


def _count_jsonl(path: str, every: int) -> tuple[int, list[int] | None]:
    """(number of lines, byte offset of lines every, 2*every, ... or None when compressed)."""
    seekable = _strip_compression(path) == path
    lines, base, offsets, last = 0, 0, [], b"\n"
    try:
        fh = _open_bytes(path)
        chunks = iter(lambda: fh.read(_CHUNK), b"")
        with fh:
            for chunk in chunks:
                n = chunk.count(b"\n")
                if seekable and lines + n >= every * (len(offsets) + 1):
                    idx = -1
                    while (idx := chunk.find(b"\n", idx + 1)) != -1:  # only chunks holding a boundary
                        lines += 1
                        if lines % every == 0:
                            offsets.append(base + idx + 1)
                else:
                    lines += n
                base += len(chunk)
                last = chunk[-1:]
    except (OSError, EOFError, _ZstdError) as exc:
        raise BloomDataError(f"{path}:{lines + 1}: cannot decompress/read ({exc}); the file is truncated "
                             "or corrupt") from None
    return lines + (last != b"\n"), (offsets if seekable else None)


def _arrow_reader(path: str):
    """An Arrow IPC reader (file or stream format) over a memory map, plus an 'is file format' flag."""
    import pyarrow as pa

    try:
        source = pa.memory_map(path)
        is_file = source.read(6) == b"ARROW1"
        source.seek(0)
        return (pa.ipc.open_file(source) if is_file else pa.ipc.open_stream(source)), is_file
    except (OSError, pa.ArrowInvalid) as exc:
        raise BloomDataError(f"{path}: not a readable Arrow IPC file or stream ({exc})") from None


def count_rows(path: str, fmt: str) -> int:
    """Rows of one file, as read_shard would see them (jsonl lines, table rows, 1 for txt)."""
    if fmt == "jsonl":
        return _count_jsonl(path, 1 << 62)[0]
    if fmt == "parquet":
        return _parquet_file(path).metadata.num_rows
    if fmt == "arrow":
        reader, is_file = _arrow_reader(path)
        if is_file:
            return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
        return sum(batch.num_rows for batch in reader)
    return 1


def plan_shards(sources: list[SourceConfig], max_rows_per_shard: int | None = None) -> list[Shard]:
    """Work units for all sources; files over ``max_rows_per_shard`` rows become row-range shards."""
    if max_rows_per_shard is not None and max_rows_per_shard < 1:
        raise BloomDataError(f"max_rows_per_shard must be >= 1, got {max_rows_per_shard}")
    shards: list[Shard] = []
    for source in sources:
        common = dict(text_field=source.text_field, lang=source.lang, lang_field=source.lang_field)
        for path, fmt in resolve_files(source):
            if max_rows_per_shard is None or fmt == "txt":
                shards.append(Shard(path, fmt, **common))
                continue
            offsets = None
            if fmt == "jsonl":
                rows, offsets = _count_jsonl(path, max_rows_per_shard)
            else:
                rows = count_rows(path, fmt)
            if rows <= max_rows_per_shard:
                shards.append(Shard(path, fmt, **common))
                continue
            for i, start in enumerate(range(0, rows, max_rows_per_shard)):
                offset = (0 if i == 0 else offsets[i - 1]) if offsets is not None else None
                stop = min(start + max_rows_per_shard, rows)
                shards.append(Shard(path, fmt, start=start, stop=stop, offset=offset, **common))
    return shards


# ---------------------------------------------------------------------------------------------------------
# Reading: one shard -> Document | Reject per row


def _row(text: object, lang: object, shard: Shard, line: int) -> Document | Reject:
    """Validate one row's text value (shared by every format)."""
    if text is None:
        return Reject("missing_text", shard.path, line, f"no {shard.text_field!r} field")
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            return Reject("invalid_utf8", shard.path, line, str(exc))
    if not isinstance(text, str):
        return Reject("non_string_text", shard.path, line, f"{shard.text_field!r} is {type(text).__name__}")
    if not text:
        return Reject("empty_text", shard.path, line, "")
    try:
        text.encode("utf-8")  # JSON escapes can smuggle in lone surrogates that no tokenizer accepts
    except UnicodeEncodeError as exc:
        return Reject("invalid_utf8", shard.path, line, str(exc))
    lang = shard.lang if shard.lang is not None else (lang if isinstance(lang, str) else None)
    return Document(text, lang, shard.path, line)


def _read_jsonl(shard: Shard) -> Iterator[Document | Reject]:
    fh = _open_bytes(shard.path)
    line_no = shard.start
    try:
        with fh:
            if shard.offset is not None:
                fh.seek(shard.offset)
            else:
                for _ in range(shard.start):
                    if not fh.readline():
                        return
            while shard.stop is None or line_no < shard.stop:
                raw = fh.readline()
                if not raw:
                    return
                line_no += 1
                yield _parse_json_line(raw, shard, line_no)
    except (OSError, EOFError, _ZstdError) as exc:  # truncated/corrupt gzip or zstd stream
        raise BloomDataError(f"{shard.path}:{line_no + 1}: cannot decompress/read ({exc}); "
                             "the file is truncated or corrupt") from None


def _parse_json_line(raw: bytes, shard: Shard, line: int) -> Document | Reject:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Reject("invalid_utf8", shard.path, line, str(exc))
    if not decoded.strip():
        return Reject("malformed_json", shard.path, line, "blank line")
    try:
        obj = json.loads(decoded)
    except ValueError as exc:
        return Reject("malformed_json", shard.path, line, str(exc))
    if not isinstance(obj, dict):
        return Reject("malformed_json", shard.path, line, f"expected an object, got {type(obj).__name__}")
    return _row(obj.get(shard.text_field), obj.get(shard.lang_field), shard, line)


def _parquet_file(path: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path, memory_map=True)
    except (OSError, pa.ArrowInvalid) as exc:
        raise BloomDataError(f"{path}: not a readable parquet file ({exc})") from None


def _columns(schema, shard: Shard) -> list[str]:
    """The columns to read; a missing text column fails fast (every row would be rejected)."""
    names = list(schema.names)
    if shard.text_field not in names:
        raise BloomDataError(f"{shard.path}: no column {shard.text_field!r} (columns: {names}); "
                             "set the source's text_field")
    wanted = [shard.text_field]
    if shard.lang is None and shard.lang_field in names and shard.lang_field != shard.text_field:
        wanted.append(shard.lang_field)
    return wanted


def _rows_of(batches, columns: list[str], shard: Shard, first: int = 0) -> Iterator[Document | Reject]:
    """Rows [start, stop) of a stream of record batches (the first one at file row ``first``), turned
    into Python objects BATCH_ROWS rows at a time."""
    for batch in batches:
        lo, hi = max(shard.start - first, 0), batch.num_rows
        if shard.stop is not None:
            hi = min(hi, shard.stop - first)
        for at in range(lo, hi, BATCH_ROWS):
            part = batch.slice(at, min(BATCH_ROWS, hi - at))
            texts = part.column(columns[0]).to_pylist()
            langs = part.column(columns[1]).to_pylist() if len(columns) > 1 else [None] * len(texts)
            for i, (text, lang) in enumerate(zip(texts, langs)):
                yield _row(text, lang, shard, first + at + i + 1)
        first += batch.num_rows
        if shard.stop is not None and first >= shard.stop:
            return


def _read_parquet(shard: Shard) -> Iterator[Document | Reject]:
    pf = _parquet_file(shard.path)
    columns = _columns(pf.schema_arrow, shard)
    groups, first, skipped = [], 0, 0  # skip row groups outside the range using only the footer
    for g in range(pf.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if first + n > shard.start and (shard.stop is None or first < shard.stop):
            skipped = first if not groups else skipped
            groups.append(g)
        first += n
    if groups:
        batches = pf.iter_batches(BATCH_ROWS, row_groups=groups, columns=columns)
        yield from _rows_of(batches, columns, shard, first=skipped)


def _read_arrow(shard: Shard) -> Iterator[Document | Reject]:
    reader, is_file = _arrow_reader(shard.path)
    columns = _columns(reader.schema, shard)
    batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else reader
    yield from _rows_of(batches, columns, shard)


def _read_txt(shard: Shard) -> Iterator[Document | Reject]:
    if shard.start > 0 or shard.stop == 0:
        return
    with _open_bytes(shard.path) as fh:
        try:
            raw = fh.read()  # one document: memory is bounded by the size of that document
        except (OSError, EOFError) as exc:
            raise BloomDataError(f"{shard.path}: cannot decompress/read ({exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        yield Reject("invalid_utf8", shard.path, 1, str(exc))
        return
    yield _row(text, None, shard, 1)


_READERS = {"jsonl": _read_jsonl, "parquet": _read_parquet, "arrow": _read_arrow, "txt": _read_txt}


def read_shard(shard: Shard) -> Iterator[Document | Reject]:
    """Stream rows [start, stop) of one file: one Document or Reject per row, in file order."""
    fmt = shard.format
    if fmt in ("auto", "hf"):
        fmt = "arrow" if fmt == "hf" else _format_of(shard.path)
    if fmt not in _READERS:
        raise BloomDataError(f"{shard.path}: unknown file type; set the source's format")
    if not os.path.isfile(shard.path):
        raise BloomDataError(f"input file not found: {shard.path} (it was listed when the shards were "
                             "planned; re-plan if the inputs changed)")
    yield from _READERS[fmt](shard)


def iter_documents(sources: list[SourceConfig]) -> Iterator[Document]:
    """Every document of every source, in plan order (rejects dropped)."""
    for shard in plan_shards(sources):
        for item in read_shard(shard):
            if isinstance(item, Document):
                yield item


_LANG_SPEC = re.compile(r"^([A-Za-z][A-Za-z0-9_-]{0,31})=(.+)$")


def source_from_spec(spec: str, text_field: str = "text", format: Format = "auto",
                     lang_field: str = "lang") -> SourceConfig:
    """A source from a CLI ``--input`` value: ``PATH`` (language from each row's lang field) or
    ``LANG=PATH`` (every document of PATH is in LANG). A path that exists as written is never split."""
    match = _LANG_SPEC.match(spec)
    if match and not os.path.exists(spec):
        return SourceConfig(paths=[match.group(2)], lang=match.group(1), text_field=text_field,
                            format=format, lang_field=lang_field)
    return SourceConfig(paths=[spec], text_field=text_field, format=format, lang_field=lang_field)
