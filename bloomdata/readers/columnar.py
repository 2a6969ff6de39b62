"""Parquet and Arrow IPC readers (``ParquetReader``, ``ArrowReader``): a row is a table row, turned into Python
objects in bounded batches.

Local Arrow files are memory-mapped; an IPC *file* and an IPC *stream* (what ``datasets.save_to_disk`` writes)
are told apart by the ``ARROW1`` magic. Parquet range shards skip row groups outside the range from the
footer alone. A remote file (``bloomdata.readers.fs``) is read through ranged requests: a parquet footer, then
the row groups of the shard; a remote Arrow file is not cut (its record batches' sizes are not known without
reading them) and is read as one stream.

The text field may be a dotted path into a struct column (``meta.content``) when no column has that name.

Size-planned shards of a large file are row ranges cut at row group (parquet) or record batch (arrow)
boundaries; ``parquet_units`` / ``arrow_units`` give each group's rows and text bytes from metadata (the
parquet footer; the arrow batches' buffer sizes, memory-mapped: no data is read).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bloomdata.errors import BloomstackError
from bloomdata.readers import fs
from bloomdata.readers.base import Reader, Units
from bloomdata.readers.records import Document, Reject, Shard, validate_row

BATCH_ROWS = 1024  # rows turned into Python objects at a time from parquet/arrow (bounds memory)


def arrow_reader(path: str, block_size: int = fs.READ_BLOCK):
    """An Arrow IPC reader (file or stream format) over a memory map (a remote file: ranged reads), plus an 'is
    file format' flag."""
    import pyarrow as pa

    try:
        source = fs.open_input(path, block_size) if fs.is_remote(path) else pa.memory_map(path)
        is_file = source.read(6) == b"ARROW1"
        source.seek(0)
        return (pa.ipc.open_file(source) if is_file else pa.ipc.open_stream(source)), is_file
    except (OSError, pa.ArrowInvalid) as exc:
        raise BloomstackError(f"{path}: not a readable Arrow IPC file or stream ({exc})") from None


def parquet_file(path: str, block_size: int = fs.PLAN_BLOCK):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if fs.is_remote(path):
            return pq.ParquetFile(fs.open_input(path, block_size))
        return pq.ParquetFile(path, memory_map=True)
    except (OSError, pa.ArrowInvalid) as exc:
        raise BloomstackError(f"{path}: not a readable parquet file ({exc})") from None


def parquet_units(path: str, text_field: str) -> list[tuple[int, int]]:
    """(rows, uncompressed bytes of the text column, or of the whole group without one) per row group."""
    meta = parquet_file(path).metadata
    units = []
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        text = [group.column(c).total_uncompressed_size for c in range(group.num_columns)
                if group.column(c).path_in_schema == text_field]
        units.append((group.num_rows, text[0] if text else group.total_byte_size))
    return units


def arrow_units(path: str, text_field: str) -> list[tuple[int, int]]:
    """(rows, bytes of the text column's buffers, or of the whole batch without one) per record batch."""
    reader, is_file = arrow_reader(path)
    batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else reader
    field = reader.schema.get_field_index(text_field)
    return [(b.num_rows, b.column(field).nbytes if field >= 0 else b.nbytes) for b in batches]


def _path_in(schema, name: str) -> list[str] | None:
    """The column (and struct fields) a field name reads: ``[name]`` for a column of that name, else the dotted
    path through struct columns (``meta.content`` -> ``["meta", "content"]``); None when there is none."""
    import pyarrow as pa

    if name in schema.names:
        return [name]
    parts = name.split(".")
    if len(parts) < 2 or parts[0] not in schema.names:
        return None
    tp = schema.field(parts[0]).type
    for part in parts[1:]:
        if not pa.types.is_struct(tp) or tp.get_field_index(part) < 0:
            return None
        tp = tp.field(part).type
    return parts


def _columns(schema, shard: Shard) -> list[list[str]]:
    """The column paths to read (text, then lang when read); a missing text column fails fast (every row would
    be rejected)."""
    text = _path_in(schema, shard.text_field)
    if text is None:
        raise BloomstackError(f"{shard.path}: no column {shard.text_field!r} (columns: {list(schema.names)}); "
                             "set the source's text_field")
    wanted = [text]
    lang = _path_in(schema, shard.lang_field) if shard.lang is None else None
    if lang is not None and shard.lang_field != shard.text_field:
        wanted.append(lang)
    return wanted


def _column(batch, path: list[str]) -> Any:
    import pyarrow.compute as pc

    column = batch.column(path[0])
    return pc.struct_field(column, path[1:]) if len(path) > 1 else column


def _rows_of(batches, columns: list[list[str]], shard: Shard, first: int = 0) -> Iterator[Document | Reject]:
    """Rows [start, stop) of a stream of record batches (the first one at file row ``first``), turned
    into Python objects BATCH_ROWS rows at a time."""
    for batch in batches:
        lo, hi = max(shard.start - first, 0), batch.num_rows
        if shard.stop is not None:
            hi = min(hi, shard.stop - first)
        for at in range(lo, hi, BATCH_ROWS):
            part = batch.slice(at, min(BATCH_ROWS, hi - at))
            texts = _column(part, columns[0]).to_pylist()
            langs = _column(part, columns[1]).to_pylist() if len(columns) > 1 else [None] * len(texts)
            for i, (text, lang) in enumerate(zip(texts, langs)):
                yield validate_row(text, lang, shard, first + at + i + 1)
        first += batch.num_rows
        if shard.stop is not None and first >= shard.stop:
            return


def read_parquet(shard: Shard) -> Iterator[Document | Reject]:
    pf = parquet_file(shard.path, fs.READ_BLOCK)
    columns = _columns(pf.schema_arrow, shard)
    groups: list[int] = []
    first, skipped = 0, 0  # skip row groups outside the range using only the footer
    for g in range(pf.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if first + n > shard.start and (shard.stop is None or first < shard.stop):
            skipped = first if not groups else skipped
            groups.append(g)
        first += n
    if groups:
        batches = pf.iter_batches(BATCH_ROWS, row_groups=groups, columns=sorted({c[0] for c in columns}))
        yield from _rows_of(batches, columns, shard, first=skipped)


def read_arrow(shard: Shard) -> Iterator[Document | Reject]:
    reader, is_file = arrow_reader(shard.path)
    columns = _columns(reader.schema, shard)
    batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else reader
    yield from _rows_of(batches, columns, shard)


class ParquetReader(Reader):
    """Parquet: cut at row group boundaries, from the footer alone (local or remote)."""

    name = "parquet"
    suffixes = (".parquet",)
    compressible = False

    def measure(self, shard: Shard) -> tuple[int, Units | None]:
        units = parquet_units(shard.path, shard.text_field)
        return sum(b for _, b in units), units

    def count_rows(self, shard: Shard, every: int) -> tuple[int, list[int] | None]:
        return parquet_file(shard.path).metadata.num_rows, None

    def read(self, shard: Shard) -> Iterator[Document | Reject]:
        return read_parquet(shard)


class ArrowReader(Reader):
    """Arrow IPC file or stream (``datasets.save_to_disk``'s files): a local one is cut at record batch
    boundaries (memory-mapped, no data read); a remote one stays whole."""

    name = "arrow"
    suffixes = (".arrow", ".ipc", ".feather")
    compressible = False

    def measure(self, shard: Shard) -> tuple[int, Units | None]:
        if fs.is_remote(shard.path):
            return fs.input_bytes(shard.path), None
        units = arrow_units(shard.path, shard.text_field)
        return sum(b for _, b in units), units

    def count_rows(self, shard: Shard, every: int) -> tuple[int, list[int] | None]:
        reader, is_file = arrow_reader(shard.path)
        if is_file:
            return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches)), None
        return sum(batch.num_rows for batch in reader), None

    def read(self, shard: Shard) -> Iterator[Document | Reject]:
        return read_arrow(shard)
