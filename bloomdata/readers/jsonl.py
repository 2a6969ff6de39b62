"""JSON-lines reader (``JsonlReader``): one JSON object per line (plain or compressed); a row is a line.

Files named ``.jsonl``, ``.ndjson`` or ``.json`` (a ``.json`` file that starts with ``[`` is a JSON array:
``bloomdata.readers.json_array``). The text field may be a dotted path into nested objects
(``records.field_value``).

Byte-range shards (what the build plans for large plain files): the planner cuts a file at the first line
start at or after each of a few byte offsets (``line_starts``: a seek and a read to the next newline per
cut, never the whole file), and a shard owns every line that *starts* in its range [lo, hi). Its reader
seeks to lo - 1 and skips through the next newline (the line that starts before lo belongs to the shard
before), then reads lines while they start before hi. It cannot know how many lines precede it, so its
line numbers count from its own first line; ``lines_before`` gives the exact offset (one read of the
file's first lo bytes) where an error must name the file's line at once.

Row-range shards of plain files seek to the byte offset the planner recorded (``count_jsonl``, one pass
with ``bytes.count`` at disk speed, which also gives exact line numbers for rejects). Compressed files
cannot seek: a range shard decompresses and skips the lines before it (decompression is ~100x faster than
tokenization, so this costs little unless one file is split into thousands of shards).

A truncated or corrupt compressed file keeps the rows read before the damage; the rest of the file is one
``corrupt_file`` reject (the build's --strict turns it into an error, like any reject). The planner counts
that reject as a row, so row-range shards of a damaged file still cover everything read.

A UTF-8 byte-order mark (what some Windows editors write) is accepted at the start of the file, and only
there: it belongs to line 1, so line numbers and the planner's byte offsets are unchanged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator

from bloomdata.errors import BloomstackError
from bloomdata.readers import fs
from bloomdata.readers.base import Reader
from bloomdata.readers.compressed import CHUNK, CORRUPT_ERRORS, corrupt_detail, open_bytes, strip_compression
from bloomdata.readers.records import Document, Reject, Shard, field_value, validate_row

BOM = b"\xef\xbb\xbf"  # the UTF-8 byte-order mark
SCAN = 1 << 13  # bytes per read when looking for the next newline after a cut (a few lines)


def line_starts(path: str, offsets: list[int]) -> list[int]:
    """For each offset (ascending), the first line start at or after it (0, or just after a newline), or
    the file size when no line starts there. Reads from offset - 1 to the next newline only."""
    starts: list[int] = []
    try:
        with (fs.open_input(path, fs.PLAN_BLOCK) if fs.is_remote(path) else open(path, "rb", buffering=0)) as fh:
            for offset in offsets:
                if offset <= 0:
                    starts.append(0)
                    continue
                if starts and starts[-1] >= offset:  # one long line spans this cut too: same next start
                    starts.append(starts[-1])
                    continue
                fh.seek(offset - 1)  # a line starts at offset exactly when the byte before it is a newline
                at = offset - 1
                while True:
                    chunk = fh.read(SCAN)
                    found = chunk.find(b"\n")
                    if not chunk or found >= 0:
                        starts.append(at + found + 1 if found >= 0 else at)
                        break
                    at += len(chunk)
    except OSError as exc:
        raise BloomstackError(f"cannot read input {path}: {exc.strerror or exc}") from None
    return starts


def lines_before(path: str, offset: int) -> int:
    """Lines of a plain file that start before the first line start at or after ``offset`` (so the file
    line number of a byte-range shard's line n is ``lines_before(path, lo) + n``). Reads offset bytes."""
    if offset <= 0:
        return 0
    newlines, left = 0, offset - 1  # newlines before offset - 1, plus line 1
    with open_bytes(path) as fh:
        while left > 0:
            chunk = fh.read(min(CHUNK, left))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
            left -= len(chunk)
    return newlines + 1


def count_jsonl(path: str, every: int) -> tuple[int, list[int] | None]:
    """(rows, byte offset of rows every, 2*every, ... or None when compressed), as read_jsonl sees them."""
    if strip_compression(path.lower()) != path.lower():
        return _count_compressed(path), None
    lines, base, last = 0, 0, b"\n"
    offsets: list[int] = []
    try:
        with open_bytes(path) as fh:
            for chunk in iter(lambda: fh.read(CHUNK), b""):
                n = chunk.count(b"\n")
                if lines + n >= every * (len(offsets) + 1):
                    idx = -1
                    while (idx := chunk.find(b"\n", idx + 1)) != -1:  # only chunks holding a boundary
                        lines += 1
                        if lines % every == 0:
                            offsets.append(base + idx + 1)
                else:
                    lines += n
                base += len(chunk)
                last = chunk[-1:]
    except OSError as exc:
        raise BloomstackError(f"cannot read input {path}: {exc.strerror or exc}") from None
    return lines + (last != b"\n"), offsets


def _count_compressed(path: str) -> int:
    """Rows of a compressed file. A damaged one has the lines before the damage plus one: the corrupt_file
    reject read_jsonl yields there, so the last range shard covers it. Counted line by line, the way
    read_jsonl reads, so that both stop at the same line (how much of a damaged block a decompressor
    hands out before failing can depend on the size of the reads)."""
    lines = 0
    try:
        with open_bytes(path) as fh:
            for _ in fh:
                lines += 1
    except CORRUPT_ERRORS:
        return lines + 1
    except OSError as exc:
        raise BloomstackError(f"cannot read input {path}: {exc.strerror or exc}") from None
    return lines


def read_jsonl(shard: Shard) -> Iterator[Document | Reject]:
    """Rows [start, stop) of a jsonl file, or the lines starting in its byte range. A damaged compressed
    stream ends the shard with one corrupt_file reject at the line where reading stopped; the rows before
    it are kept."""
    if shard.byte_range is not None:
        yield from _read_byte_range(shard)
        return
    line_no = 0  # lines read so far
    try:
        with open_bytes(shard.path) as fh:
            if shard.offset is not None:
                fh.seek(shard.offset)
                line_no = shard.start
            while shard.stop is None or line_no < shard.stop:
                raw = fh.readline()
                if not raw:
                    return
                line_no += 1
                if line_no <= shard.start:  # compressed files cannot seek: skip the rows before the range
                    continue
                if line_no == 1 and raw.startswith(BOM):
                    raw = raw[len(BOM):]
                yield _parse_json_line(raw, shard, line_no)
    except CORRUPT_ERRORS as exc:
        if line_no >= shard.start:  # else the damage lies before this range, and the shard holding it says so
            yield Reject("corrupt_file", shard.path, line_no + 1, corrupt_detail(exc))
    except OSError as exc:
        raise BloomstackError(f"{shard.path}:{line_no + 1}: cannot read ({exc.strerror or exc})") from None


def _read_byte_range(shard: Shard) -> Iterator[Document | Reject]:
    """The lines that start in [lo, hi) of a plain file, numbered from 1 at the shard's first line."""
    assert shard.byte_range is not None  # a byte-range shard
    lo, hi = shard.byte_range
    line_no = 0
    try:
        with open_bytes(shard.path) as fh:
            at = 0
            if lo > 0:
                fh.seek(lo - 1)
                at = lo - 1 + len(fh.readline())  # the end of the line holding byte lo - 1: a line start
            while at < hi:
                raw = fh.readline()
                if not raw:
                    return
                at += len(raw)
                line_no += 1
                if at == len(raw) and raw.startswith(BOM):  # line 1 of the file
                    raw = raw[len(BOM):]
                yield _parse_json_line(raw, shard, line_no)
    except OSError as exc:
        raise BloomstackError(f"{shard.path}: cannot read bytes {lo}-{hi} ({exc.strerror or exc})") from None


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
    return validate_row(field_value(obj, shard.text_field), field_value(obj, shard.lang_field), shard, line)


class JsonlReader(Reader):
    """JSON Lines: plain files are cut at line starts (``line_starts``), compressed ones stay whole."""

    name = "jsonl"
    suffixes = (".jsonl", ".ndjson", ".json")

    def byte_ranges(self, shard: Shard, size: int, target: int) -> list[tuple[int, int]] | None:
        """About equal byte ranges, each at most ``target`` bytes plus the rest of its last line, cut at line
        starts (a range past the last line start would be empty: dropped)."""
        if strip_compression(shard.path.lower()) != shard.path.lower():
            return None
        pieces = math.ceil(size / target)
        cuts = line_starts(shard.path, [size * k // pieces for k in range(1, pieces)])
        bounds = sorted({0, *(c for c in cuts if c < size), size})
        return list(zip(bounds, bounds[1:]))

    def count_rows(self, shard: Shard, every: int) -> tuple[int, list[int] | None]:
        return count_jsonl(shard.path, every)

    def read(self, shard: Shard) -> Iterator[Document | Reject]:
        return read_jsonl(shard)
