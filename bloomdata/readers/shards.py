"""Shard planning and reading: sources -> a deterministic list of ``Shard`` -> ``Document | Reject`` per row.

- ``plan_shards(sources, max_rows_per_shard, shard_bytes=, workers=)`` -> ``list[Shard]`` (``shard_plan``
  also says what size the plan was cut to and which large inputs could not be cut). Same inputs and
  settings -> same list, in the same order (sources in order, each source's files sorted by path, each
  file's shards in file order).
- ``plan_job(config)``: the plan of a sharded job (build, clean) from its ``sources``, ``max_rows_per_shard``,
  ``shard_bytes`` (``shard_bytes_field``) and ``workers``: both cut a large file the same way.
- ``read_shard(shard)``: streams one shard with bounded memory, in file order, through the format's reader
  (``registry.reader_for``: this module knows no format, it asks each file's ``Reader`` how to measure, count,
  cut and read it);
  a byte-range shard numbers its rows from its own first line: ``file_line_offsets`` turns them into file
  lines from the row counts of the shards before it (each byte of a file is read once, whatever its cuts),
  ``file_line`` / ``file_reject`` name one row's file line at once (an error: it reads the file up to the range).
- ``iter_documents(sources)``: all documents of all sources (rejects dropped).

Two ways to cut a large file, both deterministic, so an interrupted build finds the same shards again:

- By size (``shard_bytes``, the build's default): a file larger than the target size is cut into about
  equal pieces no larger than it: plain jsonl by byte ranges at line starts (a seek and a short read per
  cut), parquet at row group and arrow at record batch boundaries (metadata only). Planning never reads a
  whole file; remote files (``bloomdata.readers.fs``) are cut the same way, by ranged reads. The target is
  ``shard_bytes``, lowered for small builds until the inputs give about ``SHARDS_PER_WORKER`` shards per
  worker (never below ``MIN_SPLIT_BYTES``): a single 60 MB file on 2 workers is 8 shards, not one that leaves
  a worker idle. The trade-off: the plan, and so the shard
  markers, depend on the worker count; a build resumed with other workers re-plans and redoes its shards
  (the output bytes never depend on the plan). A compressed stream, a JSON array or a CSV file cannot be cut
  without reading it, and a txt file is one document: each stays one shard. The plan lists the large inputs
  it could not cut (those, and columnar files of a single row group or record batch).
- By rows (``max_rows_per_shard``, which takes precedence): row ranges, which needs row counts, so planning
  reads metadata (parquet, arrow), scans batch headers (arrow stream, memory-mapped), counts newlines
  (jsonl, recording each shard's byte offset; a compressed file is decompressed once) or parses the file
  (JSON arrays, CSV).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Protocol

from pydantic import BeforeValidator, Field

from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError
from bloomdata.readers import fs
from bloomdata.readers.base import Units
from bloomdata.readers.jsonl import lines_before
from bloomdata.readers.records import Document, Reject, Shard, no_documents_error
from bloomdata.readers.registry import format_of, reader_for
from bloomdata.readers.sources import SourceConfig, resolve_files
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


def count_rows(path: str, fmt: str, text_field: str = "text") -> int:
    """Rows of one file, as read_shard would see them (jsonl lines, table rows, array elements, 1 for txt)."""
    return reader_for(fmt).count_rows(Shard(path, fmt, text_field, None, "lang"), 1 << 62)[0]


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
    files = [_whole(source, path, fmt) for source in sources for path, fmt in resolve_files(source)]
    if max_rows_per_shard is not None:
        return ShardPlan([s for f in files for s in _row_ranges(f, max_rows_per_shard)], None)
    if not shard_bytes:
        return ShardPlan(files, None)
    sizes = [reader_for(f.format).measure(f) for f in files]
    target = shard_bytes
    if workers:
        total = sum(size for size, _ in sizes)
        target = min(shard_bytes, max(MIN_SPLIT_BYTES, -(-total // (workers * SHARDS_PER_WORKER))))
    shards: list[Shard] = []
    unsplittable = []
    for whole, (size, units) in zip(files, sizes):
        reader = reader_for(whole.format)
        if size <= target or reader.one_document:
            shards.append(whole)
            continue
        ranges = reader.byte_ranges(whole, size, target) if units is None else None
        if ranges is not None:
            shards += [dataclasses.replace(whole, byte_range=r) for r in ranges]
            continue
        pieces = _unit_ranges(whole, units, target) if units is not None else []
        if len(pieces) < 2:  # a stream that cannot be cut, or one row group or record batch
            unsplittable.append(whole.path)
            pieces = [whole]
        shards += pieces
    return ShardPlan(shards, target, unsplittable)


def _whole(source: SourceConfig, path: str, fmt: str) -> Shard:
    return Shard(path, fmt, text_field=source.text_field, lang=source.lang, lang_field=source.lang_field)


def _row_ranges(whole: Shard, max_rows: int) -> list[Shard]:
    reader = reader_for(whole.format)
    if reader.one_document:
        return [whole]
    rows, offsets = reader.count_rows(whole, max_rows)
    if rows <= max_rows:
        return [whole]
    shards = []
    for i, start in enumerate(range(0, rows, max_rows)):
        offset = (0 if i == 0 else offsets[i - 1]) if offsets is not None else None
        shards.append(dataclasses.replace(whole, start=start, stop=min(start + max_rows, rows), offset=offset))
    return shards


def _unit_ranges(whole: Shard, units: Units, target: int) -> list[Shard]:
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
    return [dataclasses.replace(whole, start=lo, stop=hi) for lo, hi in zip(starts, starts[1:]) if hi > lo]


def read_shard(shard: Shard) -> Iterator[Document | Reject]:
    """Stream rows [start, stop) of one file: one Document or Reject per row, in file order."""
    fmt: str | None = shard.format
    if fmt in ("auto", "hf"):
        fmt = "arrow" if fmt == "hf" else format_of(shard.path)
    if fmt is None:
        raise BloomstackError(f"{shard.path}: unknown file type; set the source's format")
    reader = reader_for(fmt)
    if not fs.isfile(shard.path):
        raise BloomstackError(f"input file not found: {shard.path} (it was listed when the shards were "
                             "planned; re-plan if the inputs changed)")
    yield from reader.read(shard)


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


def empty_inputs_error(sources: list[SourceConfig], max_rows: int = 10_000, allow: str = "") -> BloomstackError:
    """``no_documents_error`` for sources found to hold no document, from the reasons of their first ``max_rows``
    rows (a run that does not keep reject counts reads them again, that far)."""
    shards = plan_shards(sources)
    reasons: dict[str, int] = {}
    detail: dict[str, str] = {}
    for shard in shards:
        for item in read_shard(shard):
            if isinstance(item, Reject):
                reasons[item.reason] = reasons.get(item.reason, 0) + 1
                detail.setdefault(item.reason, item.detail)
            if sum(reasons.values()) >= max_rows:
                break
    top = max(reasons.items(), key=lambda item: (item[1], item[0]))[0] if reasons else ""
    return no_documents_error([s.path for s in shards], reasons, detail.get(top, ""), allow)


def iter_documents(sources: list[SourceConfig]) -> Iterator[Document]:
    """Every document of every source, in plan order (rejects dropped)."""
    for shard in plan_shards(sources):
        for item in read_shard(shard):
            if isinstance(item, Document):
                yield item
