"""Readers: every format streams the rows it was given, bad rows become Rejects with file:line, and shard
planning (whole files, row ranges, byte ranges at line starts, row groups, record batches) covers every row
exactly once, deterministically, with the file's line numbers."""

from __future__ import annotations

import gzip
import json
import os
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from bloomdata.errors import BloomstackError
from bloomdata.readers import (
    REJECT_REASONS,
    Document,
    Reject,
    Shard,
    SourceConfig,
    count_rows,
    file_line,
    iter_documents,
    plan_shards,
    read_shard,
    shard_plan,
    source_from_spec,
)
from bloomdata.readers.columnar import arrow_units, parquet_units

ROWS = [{"text": f"document {i} — ünïcode ✓ 文字", "lang": ["en", "fr", "zh"][i % 3]} for i in range(1037)]


def _jsonl_bytes(rows, trailing_newline=True) -> bytes:
    body = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows)
    return (body + ("\n" if trailing_newline else "")).encode("utf-8")


def write_rows(tmp_path, kind: str, rows=ROWS, name="data") -> str:
    """Write rows in one of the supported formats; returns the path (file or directory)."""
    table = pa.Table.from_pylist(rows)
    path = tmp_path / f"{name}.{kind}"
    if kind == "jsonl":
        path.write_bytes(_jsonl_bytes(rows))
    elif kind == "jsonl.gz":
        path.write_bytes(gzip.compress(_jsonl_bytes(rows)))
    elif kind == "jsonl.zst":
        path.write_bytes(zstandard.ZstdCompressor().compress(_jsonl_bytes(rows)))
    elif kind == "parquet":
        pq.write_table(table, path, row_group_size=128)
    elif kind in ("arrow-file", "arrow-stream"):
        path = tmp_path / f"{name}-{kind}.arrow"
        opener = pa.ipc.new_file if kind == "arrow-file" else pa.ipc.new_stream
        with opener(str(path), table.schema) as writer:
            for batch in table.to_batches(max_chunksize=100):
                writer.write_batch(batch)
    elif kind == "hf":
        datasets = pytest.importorskip("datasets")
        path = tmp_path / f"{name}-hf"
        datasets.Dataset.from_list(rows).save_to_disk(str(path), max_shard_size="20KB")
    else:
        raise AssertionError(kind)
    return str(path)


FORMATS = ["jsonl", "jsonl.gz", "jsonl.zst", "parquet", "arrow-file", "arrow-stream", "hf"]


def _read_all(source: SourceConfig, max_rows=None) -> list[Document | Reject]:
    return [item for shard in plan_shards([source], max_rows) for item in read_shard(shard)]


@pytest.mark.parametrize("kind", FORMATS)
def test_every_format_reads_all_rows_in_order(tmp_path, kind):
    path = write_rows(tmp_path, kind)
    items = _read_all(SourceConfig(paths=[path]))
    assert all(isinstance(d, Document) for d in items)
    assert [d.text for d in items] == [r["text"] for r in ROWS]
    assert [d.lang for d in items] == [r["lang"] for r in ROWS]  # from the row's lang field
    if kind != "hf":  # hf may split into several files; line numbers are per file
        assert [d.line for d in items] == list(range(1, len(ROWS) + 1))
    else:
        assert len(plan_shards([SourceConfig(paths=[path])])) > 1, "fixture should span several arrow files"


@pytest.mark.parametrize("kind", FORMATS)
@pytest.mark.parametrize("max_rows", [100, 1037, 5000])
def test_shards_cover_every_row_once(tmp_path, kind, max_rows):
    path = write_rows(tmp_path, kind)
    source = SourceConfig(paths=[path])
    shards = plan_shards([source], max_rows)
    assert shards == plan_shards([source], max_rows), "planning must be deterministic"
    assert len({s.name for s in shards}) == len(shards)
    seen = [(item.path, item.line) for s in shards for item in read_shard(s)]
    assert len(seen) == len(set(seen)) == len(ROWS), "no row lost, none read twice"
    assert all(s.stop is None or s.stop - s.start <= max_rows for s in shards)
    for path_ in {s.path for s in shards}:  # ranges of one file are contiguous from 0
        ranges = [(s.start, s.stop) for s in shards if s.path == path_]
        assert ranges[0][0] == 0
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    if kind == "jsonl" and max_rows == 100:
        assert len(shards) == 11 and all(s.offset is not None for s in shards)


def test_jsonl_without_trailing_newline_and_blank_line(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"text": "a"}\n\n{"text": "b"}\n{"text": "c"}')
    for max_rows in (None, 1, 2):
        items = _read_all(SourceConfig(paths=[str(path)]), max_rows)
        assert [(type(i).__name__, i.line) for i in items] == [
            ("Document", 1), ("Reject", 2), ("Document", 3), ("Document", 4)]
        assert items[1].reason == "malformed_json" and items[3].text == "c"


BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("kind", ["jsonl", "jsonl.gz", "jsonl.zst"])
def test_jsonl_leading_byte_order_mark_is_accepted(tmp_path, kind):
    """A BOM before line 1 is not part of the JSON; one later in the file is still a bad row."""
    body = BOM + b'{"text": "a"}\n{"text": "b"}\n' + BOM + b'{"text": "c"}\n{"text": "d"}\n'
    compress = {"jsonl": bytes, "jsonl.gz": gzip.compress, "jsonl.zst": zstandard.ZstdCompressor().compress}
    path = tmp_path / f"bom.{kind}"
    path.write_bytes(compress[kind](body))
    for max_rows in (None, 1, 2, 3):  # row-range shards: the one at row 0 and ones that seek or skip past it
        items = _read_all(SourceConfig(paths=[str(path)]), max_rows)
        assert [(type(i).__name__, i.line) for i in items] == [
            ("Document", 1), ("Document", 2), ("Reject", 3), ("Document", 4)], max_rows
        assert [items[0].text, items[1].text, items[3].text] == ["a", "b", "d"]
        assert items[2].reason == "malformed_json"
    if kind == "jsonl":  # the planner's byte offsets count the BOM as part of line 1
        shards = plan_shards([SourceConfig(paths=[str(path)])], 1)
        assert [s.offset for s in shards] == [0, len(BOM) + 14, len(BOM) + 28, 2 * len(BOM) + 42]


def test_txt_leading_byte_order_mark_is_dropped(tmp_path):
    (tmp_path / "a.txt").write_bytes(BOM + "première ligne\n".encode())
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(BOM + b"gz"))
    (tmp_path / "c.txt").write_bytes(BOM)
    items = _read_all(SourceConfig(paths=[str(tmp_path)]))
    assert [i.text for i in items[:2]] == ["première ligne\n", "gz"]
    assert (items[2].reason, items[2].line) == ("empty_text", 1)  # a BOM alone is an empty document


def test_bad_rows_become_rejects_with_file_and_line(tmp_path):
    lines = [
        b'{"text": "good", "lang": "en"}',
        b'{"text": "unterminated',
        b'{"text": "caf\xe9"}',  # latin-1 byte: invalid UTF-8
        b'{"body": "no text field"}',
        b'{"text": 42}',
        b'{"text": ""}',
        b'["text", "an array, not an object"]',
        b'{"text": null}',
        b'{"text": "lone \\ud800 surrogate"}',
        b'{"text": ["a", "list"]}',
    ]
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    items = list(read_shard(plan_shards([SourceConfig(paths=[str(path)])])[0]))
    got = [(i.reason if isinstance(i, Reject) else "ok", i.line) for i in items]
    assert got == [("ok", 1), ("malformed_json", 2), ("invalid_utf8", 3), ("missing_text", 4),
                   ("non_string_text", 5), ("empty_text", 6), ("malformed_json", 7), ("missing_text", 8),
                   ("invalid_utf8", 9), ("non_string_text", 10)]
    assert all(i.path == str(path) for i in items)
    assert {i.reason for i in items if isinstance(i, Reject)} == set(REJECT_REASONS) - {"corrupt_file"}


def test_columnar_bad_values(tmp_path):
    path = tmp_path / "bad.parquet"
    table = pa.table({"text": pa.array([b"ok", b"", None, b"\xff\xfe"], type=pa.binary())})
    pq.write_table(table, path)
    items = _read_all(SourceConfig(paths=[str(path)]))
    assert isinstance(items[0], Document) and items[0].text == "ok"
    assert [(i.reason, i.line) for i in items[1:]] == [("empty_text", 2), ("missing_text", 3), ("invalid_utf8", 4)]
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "ints.parquet")
    assert {i.reason for i in _read_all(SourceConfig(paths=[str(tmp_path / "ints.parquet")]))} == {"non_string_text"}


def test_missing_text_column_fails_fast(tmp_path):
    path = tmp_path / "x.parquet"
    pq.write_table(pa.table({"content": ["a"]}), path)
    with pytest.raises(BloomstackError, match=r"x\.parquet: no column 'text'.*content.*text_field"):
        _read_all(SourceConfig(paths=[str(path)]))


def test_configurable_text_field_and_lang_from_config(tmp_path):
    rows = [{"content": "hello", "language": "en", "lang": "xx"}, {"content": "bonjour", "language": "fr"}]
    for kind in ("jsonl", "parquet", "arrow-stream"):
        path = write_rows(tmp_path, kind, rows, name=f"cfg-{kind}")
        by_field = _read_all(SourceConfig(paths=[path], text_field="content", lang_field="language"))
        assert [(d.text, d.lang) for d in by_field] == [("hello", "en"), ("bonjour", "fr")]
        by_config = _read_all(SourceConfig(paths=[path], text_field="content", lang="sw"))
        assert [d.lang for d in by_config] == ["sw", "sw"]
        default_field = _read_all(SourceConfig(paths=[path], text_field="content"))
        assert [d.lang for d in default_field] == ["xx", None]


def test_txt_is_one_document_per_file(tmp_path):
    (tmp_path / "a.txt").write_text("line one\nline two\n", encoding="utf-8")
    (tmp_path / "b.txt.gz").write_bytes(gzip.compress(b"gzipped\n"))
    (tmp_path / "c.txt").write_bytes(b"")
    (tmp_path / "d.txt").write_bytes(b"\xc3\x28")
    (tmp_path / "README.md").write_text("not an input")
    items = _read_all(SourceConfig(paths=[str(tmp_path)], lang="en"))
    assert [(os.path.basename(i.path), type(i).__name__) for i in items] == [
        ("a.txt", "Document"), ("b.txt.gz", "Document"), ("c.txt", "Reject"), ("d.txt", "Reject")]
    assert items[0].text == "line one\nline two\n" and items[0].lang == "en" and items[0].line == 1
    assert (items[2].reason, items[3].reason) == ("empty_text", "invalid_utf8")


def test_hf_dataset_dict_and_directory_walk(tmp_path):
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS[:10]),
                               "test": datasets.Dataset.from_list(ROWS[10:13])})
    dd.save_to_disk(str(tmp_path / "hfdict"))
    docs = list(iter_documents([SourceConfig(paths=[str(tmp_path / "hfdict")])]))
    assert [d.text for d in docs] == [r["text"] for r in ROWS[10:13] + ROWS[:10]]  # splits sorted: test, train
    # a directory containing an HF dataset among other files: the dataset is read once, as a dataset
    write_rows(tmp_path, "jsonl", ROWS[:5], name="side")
    docs = list(iter_documents([SourceConfig(paths=[str(tmp_path)])]))
    assert len(docs) == 13 + 5


def test_missing_and_unknown_inputs_raise_one_line_errors(tmp_path):
    with pytest.raises(BloomstackError, match="input path not found: .*nope.jsonl") as err:
        plan_shards([SourceConfig(paths=[str(tmp_path / "nope.jsonl")])])
    assert "\n" not in str(err.value)
    with pytest.raises(BloomstackError, match="globs must match"):
        plan_shards([SourceConfig(paths=[str(tmp_path / "*.jsonl")])])
    (tmp_path / "data.csv").write_text("text\nx\n")
    with pytest.raises(BloomstackError, match="data.csv: unknown file type"):
        plan_shards([SourceConfig(paths=[str(tmp_path / "data.csv")])])
    (tmp_path / "empty").mkdir()
    with pytest.raises(BloomstackError, match="holds no readable files"):
        plan_shards([SourceConfig(paths=[str(tmp_path / "empty")])])
    shard = Shard(str(tmp_path / "gone.jsonl"), "jsonl", "text", None, "lang")
    with pytest.raises(BloomstackError, match="input file not found: .*gone.jsonl"):
        list(read_shard(shard))


def _truncated(suffix: str) -> tuple[bytes, int]:
    """ROWS compressed and cut in the middle of the stream, and the number of whole lines before the cut
    (counted with zlib / zstandard directly). zstd is written as frames of 100 rows (as pzstd or a
    seekable writer would): one frame of ROWS is a single block, so a cut would leave nothing readable."""
    if suffix == "gz":
        data = gzip.compress(_jsonl_bytes(ROWS))
        data = data[: len(data) // 2]
        prefix = zlib.decompressobj(wbits=31).decompress(data)
    else:
        compress = zstandard.ZstdCompressor().compress
        data = b"".join(compress(_jsonl_bytes(ROWS[i:i + 100])) for i in range(0, len(ROWS), 100))
        data = data[: len(data) // 2]
        prefix, rest = b"", data
        while rest:  # one decompressobj per frame
            obj = zstandard.ZstdDecompressor().decompressobj()
            prefix += obj.decompress(rest)
            rest = obj.unused_data
    assert 0 < prefix.count(b"\n") < len(ROWS)
    return data, prefix.count(b"\n")


@pytest.mark.parametrize("suffix", ["gz", "zst"])
@pytest.mark.parametrize("max_rows", [None, 1, 100, 5000])
def test_truncated_compressed_file_keeps_rows_before_the_damage(tmp_path, suffix, max_rows):
    """The rows before the cut are documents; the rest of the file is ONE corrupt_file reject at the line
    where reading stopped, also when the planner counted the file to cut it into row ranges."""
    data, whole = _truncated(suffix)
    path = tmp_path / f"broken.jsonl.{suffix}"
    path.write_bytes(data)
    source = SourceConfig(paths=[str(path)])
    assert count_rows(str(path), "jsonl") == whole + 1  # the damaged row is a row: the last shard reads it
    items = _read_all(source, max_rows)
    docs, rejects = items[:-1], items[-1:]
    assert [d.text for d in docs] == [r["text"] for r in ROWS[:whole]]
    assert [d.line for d in docs] == list(range(1, whole + 1))
    assert [(r.reason, r.path, r.line) for r in rejects] == [("corrupt_file", str(path), whole + 1)]
    assert "cannot decompress" in rejects[0].detail and "\n" not in rejects[0].detail
    if max_rows == 1:
        assert len(plan_shards([source], max_rows)) == whole + 1
    # the consumers that drop rejects (tokenizer sampling, fertility) get the rows before the damage
    assert [d.text for d in iter_documents([source])] == [r["text"] for r in ROWS[:whole]]


def test_damaged_gzip_header_or_checksum(tmp_path):
    good = gzip.compress(_jsonl_bytes(ROWS[:10]))
    (tmp_path / "crc.jsonl.gz").write_bytes(good[:-8] + bytes(8))  # every row intact, the trailer wrong
    (tmp_path / "not_gzip.jsonl.gz").write_bytes(_jsonl_bytes(ROWS[:10]))
    (tmp_path / "note.txt.gz").write_bytes(gzip.compress(b"a whole document")[:-20])
    items = _read_all(SourceConfig(paths=[str(tmp_path)]))
    got = [(os.path.basename(i.path), i.line, i.reason if isinstance(i, Reject) else "ok") for i in items]
    assert got == [("crc.jsonl.gz", n, "ok") for n in range(1, 11)] + [
        ("crc.jsonl.gz", 11, "corrupt_file"), ("not_gzip.jsonl.gz", 1, "corrupt_file"), ("note.txt.gz", 1, "corrupt_file")]


def test_tokenizer_trains_on_the_readable_rows_of_a_truncated_file(tmp_path):
    from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer

    data, whole = _truncated("gz")
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "broken.jsonl.gz").write_bytes(data)
    report = train_tokenizer(TokenizerTrainConfig(sources=[SourceConfig(paths=[str(tmp_path / "in")])],
                                                  out_dir=str(tmp_path / "tok"), vocab_size=300, seed=0,
                                                  show_progress=False))
    expected: dict[str, int] = {}
    for row in ROWS[:whole]:
        expected[row["lang"]] = expected.get(row["lang"], 0) + len(row["text"].encode("utf-8"))
    assert report["bytes_available"] == expected
    assert sum(report["docs_drawn"].values()) == whole  # the budget holds every readable document


def test_multi_frame_zstd(tmp_path):
    path = tmp_path / "frames.jsonl.zst"
    compress = zstandard.ZstdCompressor().compress
    path.write_bytes(compress(_jsonl_bytes(ROWS[:500])) + compress(_jsonl_bytes(ROWS[500:])))
    items = _read_all(SourceConfig(paths=[str(path)]), 300)
    assert [d.text for d in items] == [r["text"] for r in ROWS]


def test_plan_order_and_names(tmp_path):
    for name in ("b", "a", "c"):
        write_rows(tmp_path, "jsonl", ROWS[:3], name=name)
    shards = plan_shards([SourceConfig(paths=[str(tmp_path / "*.jsonl")])])
    assert [os.path.basename(s.path) for s in shards] == ["a.jsonl", "b.jsonl", "c.jsonl"]
    assert all(os.path.isabs(s.path) for s in shards)
    name = shards[0].name
    assert name.startswith("a.jsonl-0-end-") and "/" not in name
    other = Shard(shards[0].path, "jsonl", "body", None, "lang")
    assert other.name != name, "reading another field is another unit of work"


def test_source_from_spec(tmp_path):
    assert source_from_spec("en=data/*.jsonl").lang == "en"
    assert source_from_spec("en=data/*.jsonl").paths == ["data/*.jsonl"]
    assert source_from_spec("data/x.jsonl").lang is None
    odd = tmp_path / "k=v.jsonl"
    odd.write_text("")
    assert source_from_spec(str(odd)).paths == [str(odd)]  # an existing path is never split


def test_corpus_has_27_languages(corpus_dir):
    docs = list(iter_documents([SourceConfig(paths=[str(corpus_dir)])]))
    assert len({d.lang for d in docs}) == 27
    assert len(docs) > 27 * 100


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
