"""Shard planning and reading: sources -> a deterministic list of ``Shard`` -> ``Document | Reject`` per row.

- ``plan_shards(sources, max_rows_per_shard) -> list[Shard]``: one shard per file, or a row range of a large
  file. Same inputs -> same list, in the same order (sources in order, each source's files sorted by path).
- ``read_shard(shard)``: streams one shard with bounded memory, in file order, through the format's reader.
- ``iter_documents(sources)``: all documents of all sources (rejects dropped).

Row-range sharding needs row counts, so planning reads metadata (parquet, arrow file), scans batch headers
(arrow stream, memory-mapped: no data copied) or counts newlines (jsonl, recording each shard's byte offset).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from bloomdata.errors import BloomstackError
from bloomdata.readers.columnar import arrow_reader, parquet_file, read_arrow, read_parquet
from bloomdata.readers.jsonl import count_jsonl, read_jsonl
from bloomdata.readers.records import Document, Reject, Shard
from bloomdata.readers.sources import SourceConfig, format_of, resolve_files
from bloomdata.readers.txt import read_txt


def count_rows(path: str, fmt: str) -> int:
    """Rows of one file, as read_shard would see them (jsonl lines, table rows, 1 for txt)."""
    if fmt == "jsonl":
        return count_jsonl(path, 1 << 62)[0]
    if fmt == "parquet":
        return parquet_file(path).metadata.num_rows
    if fmt == "arrow":
        reader, is_file = arrow_reader(path)
        if is_file:
            return sum(reader.get_batch(i).num_rows for i in range(reader.num_record_batches))
        return sum(batch.num_rows for batch in reader)
    return 1


def plan_shards(sources: list[SourceConfig], max_rows_per_shard: int | None = None) -> list[Shard]:
    """Work units for all sources; files over ``max_rows_per_shard`` rows become row-range shards."""
    if max_rows_per_shard is not None and max_rows_per_shard < 1:
        raise BloomstackError(f"max_rows_per_shard must be >= 1, got {max_rows_per_shard}")
    shards: list[Shard] = []
    for source in sources:
        common = dict(text_field=source.text_field, lang=source.lang, lang_field=source.lang_field)
        for path, fmt in resolve_files(source):
            if max_rows_per_shard is None or fmt == "txt":
                shards.append(Shard(path, fmt, **common))
                continue
            offsets = None
            if fmt == "jsonl":
                rows, offsets = count_jsonl(path, max_rows_per_shard)
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


_READERS = {"jsonl": read_jsonl, "parquet": read_parquet, "arrow": read_arrow, "txt": read_txt}


def read_shard(shard: Shard) -> Iterator[Document | Reject]:
    """Stream rows [start, stop) of one file: one Document or Reject per row, in file order."""
    fmt = shard.format
    if fmt in ("auto", "hf"):
        fmt = "arrow" if fmt == "hf" else format_of(shard.path)
    if fmt not in _READERS:
        raise BloomstackError(f"{shard.path}: unknown file type; set the source's format")
    if not os.path.isfile(shard.path):
        raise BloomstackError(f"input file not found: {shard.path} (it was listed when the shards were "
                             "planned; re-plan if the inputs changed)")
    yield from _READERS[fmt](shard)


def iter_documents(sources: list[SourceConfig]) -> Iterator[Document]:
    """Every document of every source, in plan order (rejects dropped)."""
    for shard in plan_shards(sources):
        for item in read_shard(shard):
            if isinstance(item, Document):
                yield item
