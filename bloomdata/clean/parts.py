"""Streamed part files of a clean run: JSON lines in zstd, or parquet; published atomically as a group.

A part is written under a ``bloomdata.durable.temp_path`` name and renamed onto its target by
``durable.publish`` after ``durable.sync_file``, so a killed worker leaves only temp files (removed under the
run's lock), never a short part under a final name. Lines are buffered and handed to the compressor ~1 MB
at a time (one call per line costs ~1 us). zstd level 3, one frame per part: the bytes depend only on the
lines, so parts are identical for any number of workers. Parquet parts hold one row group per part with
``text`` and ``lang`` columns (what the readers take), written from memory: a part is one shard's language,
bounded by ``max_rows_per_shard``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import IO

from bloomdata import durable
from bloomdata.readers.compressed import open_bytes

ZSTD_LEVEL = 3
BUFFER_BYTES = 1 << 20


class LinesWriter:
    """JSON lines (bytes, each ending in a newline) into ``path`` as one zstd frame, or into parquet."""

    def __init__(self, path: str, parquet: bool = False):
        import zstandard

        self.path, self.parquet = path, parquet
        self.tmp = durable.temp_path(path)
        self.lines = 0
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._rows: list[bytes] = []
        self._file = open(self.tmp, "wb")
        self._zstd = None if parquet else zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(
            self._file, closefd=False, write_return_read=True)

    def write(self, line: bytes) -> None:
        self.lines += 1
        if self.parquet:
            self._rows.append(line)
            return
        self._buffer.append(line)
        self._buffered += len(line)
        if self._buffered >= BUFFER_BYTES:
            self._flush()

    def _flush(self) -> None:
        assert self._zstd is not None  # a jsonl.zst writer
        self._zstd.write(b"".join(self._buffer))
        self._buffer.clear()
        self._buffered = 0

    def finish(self) -> tuple[str, str]:
        """Close and sync the temp file; returns (temp, target) for ``durable.publish``."""
        import zstandard

        if self.parquet:
            _write_parquet(self._file, self._rows)
        else:
            self._flush()
            assert self._zstd is not None
            self._zstd.flush(zstandard.FLUSH_FRAME)
            self._zstd.close()
        durable.sync_file(self._file)
        self._file.close()
        return self.tmp, self.path

    def abort(self) -> None:
        self._file.close()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)


def _write_parquet(file, rows: list[bytes]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    records = [json.loads(row) for row in rows]
    table = pa.table({"text": pa.array([r["text"] for r in records], pa.string()),
                      "lang": pa.array([r.get("lang") for r in records], pa.string())})
    pq.write_table(table, file, compression="zstd", row_group_size=max(len(rows), 1))


def staged(path: str, write: Callable[[IO[bytes]], object]) -> tuple[str, str]:
    """Write a file under its temp name and sync it; returns (temp, target) for a group ``publish``."""
    tmp = durable.temp_path(path)
    try:
        with open(tmp, "wb") as f:
            write(f)
            durable.sync_file(f)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return tmp, path


def publish(writers: list[LinesWriter], others: Sequence[tuple[str, str]] = ()) -> None:
    """Finish every writer and rename its file, then the ``staged`` ``others``, onto their targets: one
    group, so each directory is fsynced once (a shard's ~10 files cost 1 directory sync, not 10)."""
    durable.publish([w.finish() for w in writers] + list(others))


def abort(writers: list[LinesWriter]) -> None:
    for w in writers:
        w.abort()


def read_lines(path: str) -> Iterator[bytes]:
    """The lines of a candidates file (zstd JSON lines), newline included."""
    with open_bytes(path) as fh:
        yield from fh
