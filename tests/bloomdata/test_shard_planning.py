"""Size-planned shards: byte ranges of jsonl cut at line starts (each line read exactly once, by the shard it
starts in, with its file line number), planning that reads only near the cuts, row groups of parquet and
record batches of arrow, and inputs that stay whole (compressed streams, txt)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from bloomdata.readers import (
    Document,
    Shard,
    SourceConfig,
    file_line,
    plan_shards,
    read_shard,
    shard_plan,
)
from bloomdata.readers.columnar import arrow_units, parquet_units
from tests.bloomdata.reader_inputs import BOM, ROWS, _jsonl_bytes, write_rows

# --- size-planned shards: byte ranges of jsonl, row groups of parquet, record batches of arrow -------------


def _line_starts_of(data: bytes) -> set[int]:
    return {0} | {i + 1 for i, b in enumerate(data) if b == 0x0A}


def _read_with_file_lines(shards) -> list[tuple[str, int, str]]:
    """(kind, file line, text or reason) of every row of the shards, byte-range lines made file lines."""
    return [(type(i).__name__, file_line(s, i.line), i.text if isinstance(i, Document) else i.reason)
            for s in shards for i in read_shard(s)]


ODD_JSONL = (BOM + b'{"text": "first"}\n' + b'\n' + b'{"text": "' + b"long " * 300 + b'"}\n'
             + b'{"text": "crlf"}\r\n' + b'{"text": "caf\xe9"}\n'
             + b"".join(b'{"text": "row %d"}\n' % i for i in range(40)) + b'{"text": "no newline"}')


@pytest.mark.parametrize("shard_bytes", [1, 7, 64, 1000, 10**6])
def test_byte_range_shards_cover_every_line_once(tmp_path, shard_bytes):
    """Cut at line starts, contiguous from byte 0 to the end, and together they read exactly the rows of
    the whole file with the same (file) line numbers: a BOM, a blank line, a line longer than a shard,
    CRLF, invalid UTF-8 and a last line without a newline included."""
    path = tmp_path / "odd.jsonl"
    path.write_bytes(ODD_JSONL)
    source = SourceConfig(paths=[str(path)])
    whole = _read_with_file_lines(plan_shards([source]))
    assert whole[0] == ("Document", 1, "first") and whole[1][2] == "malformed_json" and len(whole) == 46
    plan = shard_plan([source], shard_bytes=shard_bytes)
    assert plan.shards == shard_plan([source], shard_bytes=shard_bytes).shards, "planning must be deterministic"
    if shard_bytes >= len(ODD_JSONL):
        assert [s.byte_range for s in plan.shards] == [None]
    else:
        ranges = [s.byte_range for s in plan.shards]
        assert ranges[0][0] == 0 and ranges[-1][1] == len(ODD_JSONL)
        assert all(a[1] == b[0] < b[1] for a, b in zip(ranges, ranges[1:]))
        assert {lo for lo, _ in ranges} <= _line_starts_of(ODD_JSONL)
        assert len({s.name for s in plan.shards}) == len(ranges)
        assert plan.shards[1].name.startswith(f"odd.jsonl-b{ranges[1][0]}-{ranges[1][1]}-")
        assert all(s.local_lines for s in plan.shards)
        if shard_bytes == 1:  # one line per shard
            assert len(ranges) == 46
    assert _read_with_file_lines(plan.shards) == whole
    assert plan.unsplittable == []


def test_a_byte_range_owns_the_lines_that_start_in_it(tmp_path):
    """Ranges cut anywhere (at a line start, mid-line, on a newline byte): two ranges [0, c) and [c, end)
    read every row once, in order; each row is read by the range its first byte lies in."""
    path = tmp_path / "x.jsonl"
    data = b'{"text": "a"}\n{"text": "bb"}\n\n{"text": "ccc"}\n{"text": "d"}'
    path.write_bytes(data)
    whole = [(i.line, getattr(i, "text", None)) for i in read_shard(plan_shards([SourceConfig(paths=[str(path)])])[0])]
    starts = sorted(_line_starts_of(data))
    for cut in range(len(data) + 1):
        first, second = (Shard(str(path), "jsonl", "text", None, "lang", byte_range=r)
                         for r in ((0, cut), (cut, len(data))))
        head = list(read_shard(first))
        tail = list(read_shard(second))
        owned = sum(1 for s in starts if s < cut)
        assert len(head) == owned and [(i.line, getattr(i, "text", None)) for i in head] == whole[:owned], cut
        assert [(i.line + owned, getattr(i, "text", None)) for i in tail] == whole[owned:], cut
        assert file_line(second, 1) == owned + 1 or not tail


def test_byte_range_planning_reads_only_near_the_cuts(tmp_path, monkeypatch):
    """Planning a large file seeks to each cut and reads to the next newline; it never reads the file."""
    import builtins

    from bloomdata.readers import jsonl

    path = tmp_path / "big.jsonl"
    line = json.dumps({"text": "x" * 1000}).encode() + b"\n"
    path.write_bytes(line * 8000)  # 8 MB
    read = [0]

    class Counting:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def seek(self, *a):
            return self.fh.seek(*a)

        def read(self, n=-1):
            data = self.fh.read(n)
            read[0] += len(data)
            return data

    monkeypatch.setattr(jsonl, "open", lambda *a, **k: Counting(builtins.open(*a, **k)), raising=False)
    plan = shard_plan([SourceConfig(paths=[str(path)])], shard_bytes=500_000)
    assert len(plan.shards) == 17 and all(s.byte_range[0] % len(line) == 0 for s in plan.shards)
    assert 0 < read[0] <= 16 * jsonl.SCAN < path.stat().st_size // 50


def test_worker_count_lowers_the_shard_size(tmp_path, monkeypatch):
    """shard_bytes bounds a shard; a plan for N workers cuts smaller, to about 4 shards per worker, but never
    below MIN_SPLIT_BYTES; whole files are not cut."""
    from bloomdata.readers import shards as planning

    path = tmp_path / "mid.jsonl"
    path.write_bytes(_jsonl_bytes(ROWS * 4))  # ~170 KB
    size = path.stat().st_size
    source = SourceConfig(paths=[str(path)])
    assert len(shard_plan([source], shard_bytes=64_000_000, workers=2).shards) == 1  # under MIN_SPLIT_BYTES
    monkeypatch.setattr(planning, "MIN_SPLIT_BYTES", 10_000)
    plan = shard_plan([source], shard_bytes=64_000_000, workers=2)
    assert plan.shard_bytes == -(-size // 8) and len(plan.shards) == 8
    assert len(shard_plan([source], shard_bytes=64_000_000, workers=1).shards) == 4
    assert len(shard_plan([source], shard_bytes=30_000, workers=1).shards) == -(-size // 30_000)
    assert len(shard_plan([source], shard_bytes=64_000_000).shards) == 1  # no workers given: shard_bytes alone
    assert len(shard_plan([source], shard_bytes=0, workers=2).shards) == 1  # 0: never cut
    rows = shard_plan([source], 1000, shard_bytes=30_000, workers=2).shards  # max_rows_per_shard wins
    assert [(s.start, s.stop, s.byte_range) for s in rows][:2] == [(0, 1000, None), (1000, 2000, None)]


@pytest.mark.parametrize("kind", ["parquet", "arrow-file", "arrow-stream"])
def test_columnar_files_are_cut_at_row_groups_and_record_batches(tmp_path, kind):
    path = write_rows(tmp_path, kind)  # parquet: row groups of 128 rows; arrow: record batches of 100 rows
    unit = 128 if kind == "parquet" else 100
    source = SourceConfig(paths=[path])
    text_bytes = sum(b for _, b in (parquet_units if kind == "parquet" else arrow_units)(path, "text"))
    plan = shard_plan([source], shard_bytes=text_bytes // 3)
    assert 3 <= len(plan.shards) <= 5 and plan.unsplittable == []
    assert all(s.start % unit == 0 and s.byte_range is None for s in plan.shards)
    assert plan.shards[0].start == 0 and plan.shards[-1].stop == len(ROWS)
    assert all(a.stop == b.start for a, b in zip(plan.shards, plan.shards[1:]))
    whole = _read_with_file_lines(plan_shards([source]))
    assert _read_with_file_lines(plan.shards) == whole and [w[1] for w in whole] == list(range(1, len(ROWS) + 1))
    one_unit = shard_plan([source], shard_bytes=1)  # every row group / batch its own shard
    assert len(one_unit.shards) == -(-len(ROWS) // unit)
    assert _read_with_file_lines(one_unit.shards) == whole


def test_compressed_and_txt_inputs_stay_whole(tmp_path):
    """A .gz/.zst stream cannot be cut without reading it: one shard, listed as unsplittable when it is over
    the shard size (on disk); a txt file is one document: one shard, not listed; so is a parquet file of
    one row group."""
    big_gz = write_rows(tmp_path, "jsonl.gz")
    small_zst = tmp_path / "small.jsonl.zst"
    small_zst.write_bytes(zstandard.ZstdCompressor().compress(_jsonl_bytes(ROWS[:2])))
    (tmp_path / "doc.txt").write_text("word " * 2000)
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "one_group.parquet")
    plan = shard_plan([SourceConfig(paths=[str(tmp_path)])], shard_bytes=1000, workers=2)
    assert [(os.path.basename(s.path), s.start, s.stop, s.byte_range) for s in plan.shards] == [
        ("data.jsonl.gz", 0, None, None), ("doc.txt", 0, None, None), ("one_group.parquet", 0, None, None),
        ("small.jsonl.zst", 0, None, None)]
    assert plan.unsplittable == [big_gz, str(tmp_path / "one_group.parquet")] and plan.shard_bytes == 1000
