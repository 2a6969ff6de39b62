"""Readers: every format streams the rows it was given, bad rows become Rejects with file:line, and shard
planning (whole files, row ranges, byte ranges at line starts, row groups, record batches) covers every row
exactly once, deterministically, with the file's line numbers."""

from __future__ import annotations

import gzip
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
    iter_documents,
    plan_shards,
    read_shard,
    source_from_spec,
)
from tests.bloomdata.reader_inputs import BOM, FORMATS, ROWS, _jsonl_bytes, write_rows


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
    (tmp_path / "data.xml").write_text("<text>x</text>\n")  # .csv is a format now (issue 52)
    with pytest.raises(BloomstackError, match="data.xml: unknown file type"):
        plan_shards([SourceConfig(paths=[str(tmp_path / "data.xml")])])
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
        ("crc.jsonl.gz", 11, "corrupt_file"), ("not_gzip.jsonl.gz", 1, "corrupt_file"),
        ("note.txt.gz", 1, "corrupt_file")]


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
    assert report.bytes_available == expected
    assert sum(report.docs_drawn.values()) == whole  # the budget holds every readable document


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
