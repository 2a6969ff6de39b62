"""JSON-lines reader: one JSON object per line (plain, ``.gz`` or ``.zst``); a row is a line.

Row-range shards of plain files seek to the byte offset the planner recorded (``count_jsonl``, one pass
with ``bytes.count`` at disk speed, which also gives exact line numbers for rejects). Compressed files
cannot seek: a range shard decompresses and skips the lines before it (decompression is ~100x faster than
tokenization, so this costs little unless one file is split into thousands of shards).

A UTF-8 byte-order mark (what some Windows editors write) is accepted at the start of the file, and only
there: it belongs to line 1, so line numbers and the planner's byte offsets are unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from bloomdata.errors import BloomstackError
from bloomdata.readers.compressed import CHUNK, DECOMPRESS_ERRORS, open_bytes, strip_compression
from bloomdata.readers.records import Document, Reject, Shard, validate_row

BOM = b"\xef\xbb\xbf"  # the UTF-8 byte-order mark


def count_jsonl(path: str, every: int) -> tuple[int, list[int] | None]:
    """(number of lines, byte offset of lines every, 2*every, ... or None when compressed)."""
    seekable = strip_compression(path) == path
    lines, base, offsets, last = 0, 0, [], b"\n"
    try:
        fh = open_bytes(path)
        chunks = iter(lambda: fh.read(CHUNK), b"")
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
    except DECOMPRESS_ERRORS as exc:
        raise BloomstackError(f"{path}:{lines + 1}: cannot decompress/read ({exc}); the file is truncated "
                             "or corrupt") from None
    return lines + (last != b"\n"), (offsets if seekable else None)


def read_jsonl(shard: Shard) -> Iterator[Document | Reject]:
    fh = open_bytes(shard.path)
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
                if line_no == 1 and raw.startswith(BOM):
                    raw = raw[len(BOM):]
                yield _parse_json_line(raw, shard, line_no)
    except DECOMPRESS_ERRORS as exc:  # truncated/corrupt gzip or zstd stream
        raise BloomstackError(f"{shard.path}:{line_no + 1}: cannot decompress/read ({exc}); "
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
    return validate_row(obj.get(shard.text_field), obj.get(shard.lang_field), shard, line)
