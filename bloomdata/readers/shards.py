"""Shard planning and reading: sources -> a deterministic list of ``Shard`` -> ``Document | Reject`` per row.

- ``plan_shards(sources, max_rows_per_shard, shard_bytes=, workers=)`` -> ``list[Shard]`` (``shard_plan``
  also says what size the plan was cut to and which large inputs could not be cut). Same inputs and
  settings -> same list, in the same order (sources in order, each source's files sorted by path, each
  file's shards in file order).
- ``plan_job(config)``: the plan of a sharded job (build, clean) from its ``sources``, ``max_rows_per_shard``,
  ``shard_bytes`` (``shard_bytes_field``) and ``workers``: both cut a large file the same way.
- ``read_shard(shard)``: streams one shard with bounded memory, in file order, through the format's reader;
  a byte-range shard numbers its rows from its own first line: ``file_line_offsets`` turns them into file
  lines from the row counts of the shards before it (each byte of a file is read once, whatever its cuts),
  ``file_line`` / ``file_reject`` name one row's file line at once (an error: it reads the file up to the range).
- ``iter_documents(sources)``: all documents of all sources (rejects dropped).

Two ways to cut a large file, both deterministic, so an interrupted build finds the same shards again:

- By size (``shard_bytes``, the build's default): a file larger than the target size is cut into about
  equal pieces no larger than it: plain jsonl by byte ranges at line starts (a seek and a short read per
  cut), parquet at row group and arrow at record batch boundaries (metadata only). Planning never reads a
  whole file. The target is ``shard_bytes``, lowered for small builds until the inputs give about
  ``SHARDS_PER_WORKER`` shards per worker (never below ``MIN_SPLIT_BYTES``): a single 60 MB file on 2
  workers is 8 shards, not one that leaves a worker idle. The trade-off: the plan, and so the shard
  markers, depend on the worker count; a build resumed with other workers re-plans and redoes its shards
  (the output bytes never depend on the plan). A compressed stream cannot be cut without reading it,
  and a txt file is one document: each stays one shard. The plan lists the large inputs it could not
  cut (compressed streams, columnar files of a single row group or record batch).
- By rows (``max_rows_per_shard``, which takes precedence): row ranges, which needs row counts, so planning
  reads metadata (parquet, arrow), scans batch headers (arrow stream, memory-mapped) or counts newlines
  (jsonl, recording each shard's byte offset; a compressed file is decompressed once).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol, cast

from pydantic import BeforeValidator, Field

from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError
from bloomdata.readers.columnar import (
    arrow_reader,
    arrow_units,
    parquet_file,
    parquet_units,
    read_arrow,
    read_parquet,
)
from bloomdata.readers.compressed import strip_compression
from bloomdata.readers.jsonl import count_jsonl, line_starts, lines_before, read_jsonl
from bloomdata.readers.records import Document, Reject, Shard
from bloomdata.readers.sources import Format, SourceConfig, format_of, resolve_files
from bloomdata.readers.txt import read_txt
from bloomdata.units import parse_bytes

# Size planning for parallel builds: about this many shards per worker (so that shards of unequal speed
# still balance), but never shards smaller than MIN_SPLIT_BYTES when the cut only serves the worker count
# (each shard costs a task, its part files with their fsyncs, and a marker).
SHARDS_PER_WORKER = 4
MIN_SPLIT_BYTES = 1 << 20


ShardBytes = Annotated[int, BeforeValidator(parse_bytes)]  # "64MB", "1GiB" or a number of bytes


def shard_bytes_field(**extra: Any) -> Any:
    """The ``shard_bytes`` field of a sharded job's config (build, clean); ``extra``: more json_schema_extra."""
    return Field(default=64_000_000, ge=0, json_schema_extra={**cli_option(metavar="BYTES"), **extra},
                 description="cut larger files into shards of at most about this size (64MB, 1GiB): jsonl by "
                             "line-aligned byte ranges, parquet by row groups, arrow by record batches; smaller when "
                             "the inputs would give fewer than 4 shards per worker; .gz/.zst and txt files stay "
                             "whole; 0: one shard per file")


class ShardedInputs(Protocol):
    """What ``plan_job`` reads of a job's config (BuildConfig, CleanConfig)."""

    sources: list[SourceConfig]
    max_rows_per_shard: int | None
    shard_bytes: int
    workers: int


def plan_job(config: ShardedInputs) -> ShardPlan:
    """A job's shards: cut by ``max_rows_per_shard`` when set, else by size for ``config.workers`` workers
    (in-process, ``workers=0``: by ``shard_bytes`` alone)."""
    return shard_plan(config.sources, config.max_rows_per_shard, shard_bytes=config.shard_bytes,
                      workers=config.workers or None)


@dataclass(frozen=True)
class ShardPlan:
    shards: list[Shard]
    shard_bytes: int | None  # the size files were cut to (None: not cut by size)
    # inputs larger than shard_bytes left whole: compressed streams, columnar files of one row group or batch
    unsplittable: list[str] = field(default_factory=list)


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


def plan_shards(sources: list[SourceConfig], max_rows_per_shard: int | None = None, *, shard_bytes: int = 0,
                workers: int | None = None) -> list[Shard]:
    """Work units for all sources (see ``shard_plan``); with the defaults, one shard per file."""
    return shard_plan(sources, max_rows_per_shard, shard_bytes=shard_bytes, workers=workers).shards


def shard_plan(sources: list[SourceConfig], max_rows_per_shard: int | None = None, *, shard_bytes: int = 0,
               workers: int | None = None) -> ShardPlan:
    """Work units for all sources. ``max_rows_per_shard``: files over that many rows become row ranges.
    Else ``shard_bytes`` > 0: files over the target size (``shard_bytes``, lowered to give ``workers``
    about ``SHARDS_PER_WORKER`` shards each) are cut by size. Else one shard per file."""
    if max_rows_per_shard is not None and max_rows_per_shard < 1:
        raise BloomstackError(f"max_rows_per_shard must be >= 1, got {max_rows_per_shard}")
    if shard_bytes < 0:
        raise BloomstackError(f"shard_bytes must be >= 0 (0: one shard per file), got {shard_bytes}")
    files = [(source, path, fmt) for source in sources for path, fmt in resolve_files(source)]
    if max_rows_per_shard is not None:
        return ShardPlan([s for f in files for s in _row_ranges(*f, max_rows_per_shard)], None)
    if not shard_bytes:
        return ShardPlan([_whole(*f) for f in files], None)
    sizes = [_size_units(path, fmt, source.text_field) for source, path, fmt in files]
    target = shard_bytes
    if workers:
        total = sum(size for size, _ in sizes)
        target = min(shard_bytes, max(MIN_SPLIT_BYTES, -(-total // (workers * SHARDS_PER_WORKER))))
    shards: list[Shard] = []
    unsplittable = []
    for (source, path, fmt), (size, units) in zip(files, sizes):
        if size <= target or fmt == "txt":
            shards.append(_whole(source, path, fmt))
        elif fmt == "jsonl" and units is None:
            if strip_compression(path) != path:
                unsplittable.append(path)
                shards.append(_whole(source, path, fmt))
            else:
                shards += _byte_ranges(source, path, size, target)
        else:
            ranges = _unit_ranges(source, path, fmt, units or [], target)
            if len(ranges) < 2:  # one row group or record batch: it cannot be cut
                unsplittable.append(path)
                ranges = [_whole(source, path, fmt)]
            shards += ranges
    return ShardPlan(shards, target, unsplittable)


def _common(source: SourceConfig) -> dict:
    return dict(text_field=source.text_field, lang=source.lang, lang_field=source.lang_field)


def _whole(source: SourceConfig, path: str, fmt: str) -> Shard:
    return Shard(path, cast(Format, fmt), **_common(source))


def _row_ranges(source: SourceConfig, path: str, fmt: str, max_rows: int) -> list[Shard]:
    if fmt == "txt":
        return [_whole(source, path, fmt)]
    offsets = None
    if fmt == "jsonl":
        rows, offsets = count_jsonl(path, max_rows)
    else:
        rows = count_rows(path, fmt)
    if rows <= max_rows:
        return [_whole(source, path, fmt)]
    shards = []
    for i, start in enumerate(range(0, rows, max_rows)):
        offset = (0 if i == 0 else offsets[i - 1]) if offsets is not None else None
        shards.append(Shard(path, cast(Format, fmt), start=start, stop=min(start + max_rows, rows), offset=offset,
                            **_common(source)))
    return shards


def _size_units(path: str, fmt: str, text_field: str) -> tuple[int, list[tuple[int, int]] | None]:
    """(bytes, None) for a file cut by bytes or not at all; (text bytes, [(rows, bytes)] per row group or
    record batch) for a columnar file."""
    if fmt in ("parquet", "arrow"):
        units = (parquet_units if fmt == "parquet" else arrow_units)(path, text_field)
        return sum(b for _, b in units), units
    try:
        return os.path.getsize(path), None
    except OSError as exc:
        raise BloomstackError(f"cannot read input {path}: {exc.strerror or exc}") from None


def _byte_ranges(source: SourceConfig, path: str, size: int, target: int) -> list[Shard]:
    """About equal byte ranges, each at most ``target`` bytes plus the rest of its last line, cut at
    line starts (a range past the last line start would be empty: dropped)."""
    pieces = math.ceil(size / target)
    cuts = line_starts(path, [size * k // pieces for k in range(1, pieces)])
    bounds = sorted({0, *(c for c in cuts if c < size), size})
    return [Shard(path, "jsonl", byte_range=(lo, hi), **_common(source)) for lo, hi in zip(bounds, bounds[1:])]


def _unit_ranges(source: SourceConfig, path: str, fmt: str, units: list[tuple[int, int]],
                 target: int) -> list[Shard]:
    """Row ranges of whole row groups / record batches, each about size / ceil(size / target) bytes: a
    cut goes at the unit boundary nearest to each equal share. One unit is one shard, however large."""
    row_at, byte_at = [0], [0]  # row and byte offset of each unit boundary
    for rows, size in units:
        row_at.append(row_at[-1] + rows)
        byte_at.append(byte_at[-1] + size)
    pieces = math.ceil(byte_at[-1] / target)
    cuts = set()
    for k in range(1, pieces):
        goal = byte_at[-1] * k / pieces
        j = bisect.bisect_left(byte_at, goal, 1, len(units))  # first inner boundary at or past the goal
        cuts.add(j - 1 if j > 1 and goal - byte_at[j - 1] < byte_at[j] - goal else j)
    starts = sorted({0, *(row_at[j] for j in cuts if 0 < j < len(units)), row_at[-1]})
    return [Shard(path, cast(Format, fmt), start=lo, stop=hi, **_common(source)) for lo, hi in zip(starts, starts[1:]) if hi > lo]


_READERS = {"jsonl": read_jsonl, "parquet": read_parquet, "arrow": read_arrow, "txt": read_txt}


def read_shard(shard: Shard) -> Iterator[Document | Reject]:
    """Stream rows [start, stop) of one file: one Document or Reject per row, in file order."""
    fmt: str | None = shard.format
    if fmt in ("auto", "hf"):
        fmt = "arrow" if fmt == "hf" else format_of(shard.path)
    if fmt not in _READERS:
        raise BloomstackError(f"{shard.path}: unknown file type; set the source's format")
    if not os.path.isfile(shard.path):
        raise BloomstackError(f"input file not found: {shard.path} (it was listed when the shards were "
                             "planned; re-plan if the inputs changed)")
    yield from _READERS[fmt](shard)


def file_line_offsets(shards: list[Shard], rows: list[int]) -> list[int]:
    """Per shard, what to add to its rows' line numbers to make them file lines, from every shard's row count
    (``rows``, in plan order): the rows of the earlier byte ranges of its file for a byte-range shard (its
    file's ranges are consecutive in plan order, the first at byte 0), 0 for the others (their readers count
    file lines)."""
    offsets, before = [], 0
    for shard, n in zip(shards, rows):
        if not shard.local_lines:
            offsets.append(0)
            continue
        if shard.byte_range is not None and shard.byte_range[0] == 0:
            before = 0
        offsets.append(before)
        before += n
    return offsets


def file_line(shard: Shard, line: int) -> int:
    """The file's line number of row ``line`` of ``shard``: for a byte-range shard, counts the lines before
    it (reads the file up to the range; for an error message, not for every row)."""
    if shard.byte_range is None:  # not local_lines: already the file's
        return line
    return lines_before(shard.path, shard.byte_range[0]) + line


def file_reject(shard: Shard, reject: Reject) -> Reject:
    """The reject with its file line number (``file_line``): for an error raised where it is read."""
    return dataclasses.replace(reject, line=file_line(shard, reject.line))


def iter_documents(sources: list[SourceConfig]) -> Iterator[Document]:
    """Every document of every source, in plan order (rejects dropped)."""
    for shard in plan_shards(sources):
        for item in read_shard(shard):
            if isinstance(item, Document):
                yield item
