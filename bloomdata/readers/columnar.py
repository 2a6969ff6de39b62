"""Parquet and Arrow IPC readers: a row is a table row, turned into Python objects in bounded batches.

Arrow files are memory-mapped; an IPC *file* and an IPC *stream* (what ``datasets.save_to_disk`` writes)
are told apart by the ``ARROW1`` magic. Parquet range shards skip row groups outside the range from the
footer alone.

Size-planned shards of a large file are row ranges cut at row group (parquet) or record batch (arrow)
boundaries; ``parquet_units`` / ``arrow_units`` give each group's rows and text bytes from metadata (the
parquet footer; the arrow batches' buffer sizes, memory-mapped: no data is read).
"""

from __future__ import annotations

from collections.abc import Iterator

from bloomdata.errors import BloomstackError
from bloomdata.readers.records import Document, Reject, Shard, validate_row

BATCH_ROWS = 1024  # rows turned into Python objects at a time from parquet/arrow (bounds memory)


def arrow_reader(path: str):
    """An Arrow IPC reader (file or stream format) over a memory map, plus an 'is file format' flag."""
    import pyarrow as pa

    try:
        source = pa.memory_map(path)
        is_file = source.read(6) == b"ARROW1"
        source.seek(0)
        return (pa.ipc.open_file(source) if is_file else pa.ipc.open_stream(source)), is_file
    except (OSError, pa.ArrowInvalid) as exc:
        raise BloomstackError(f"{path}: not a readable Arrow IPC file or stream ({exc})") from None


def parquet_file(path: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
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


def _columns(schema, shard: Shard) -> list[str]:
    """The columns to read; a missing text column fails fast (every row would be rejected)."""
    names = list(schema.names)
    if shard.text_field not in names:
        raise BloomstackError(f"{shard.path}: no column {shard.text_field!r} (columns: {names}); "
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
                yield validate_row(text, lang, shard, first + at + i + 1)
        first += batch.num_rows
        if shard.stop is not None and first >= shard.stop:
            return


def read_parquet(shard: Shard) -> Iterator[Document | Reject]:
    pf = parquet_file(shard.path)
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
        batches = pf.iter_batches(BATCH_ROWS, row_groups=groups, columns=columns)
        yield from _rows_of(batches, columns, shard, first=skipped)


def read_arrow(shard: Shard) -> Iterator[Document | Reject]:
    reader, is_file = arrow_reader(shard.path)
    columns = _columns(reader.schema, shard)
    batches = (reader.get_batch(i) for i in range(reader.num_record_batches)) if is_file else reader
    yield from _rows_of(batches, columns, shard)
