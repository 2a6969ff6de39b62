"""The formats HF users have and the one reader interface (issue 52): a top-level JSON array, JSON Lines named .json,
CSV/TSV with a text column, .bz2/.xz, a dotted text field, and a user's reader named as package.module:Class.
Each builds the bytes the same rows build from a jsonl file."""

from __future__ import annotations

import bz2
import json
import lzma
from collections.abc import Iterator

import pytest

from bloomdata.build import run_build
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomdata.readers import (
    BUILTINS,
    Document,
    Reader,
    Reject,
    Shard,
    SourceConfig,
    format_of,
    plan_shards,
    read_shard,
    shard_plan,
    validate_row,
)
from bloomdata.readers.compressed import open_bytes
from tests.bloomdata.build_helpers import _config, _outputs
from tests.bloomdata.reader_inputs import BOM, FORMATS, ROWS, _jsonl_bytes, write_rows


def _read_all(source: SourceConfig, max_rows=None) -> list[Document | Reject]:
    return [item for shard in plan_shards([source], max_rows) for item in read_shard(shard)]


def _built(tmp_path, tok, path, name: str) -> dict[str, bytes]:
    out = tmp_path / f"out-{name}"
    run_build(_config([path], tok, out, workers=0, append_eod=True))
    return _outputs(out)


@pytest.fixture(scope="module")
def jsonl_build(tmp_path_factory, small_tokenizer_dir) -> dict[str, bytes]:
    tmp = tmp_path_factory.mktemp("reference")
    return _built(tmp, small_tokenizer_dir, write_rows(tmp, "jsonl"), "jsonl")


@pytest.mark.parametrize("kind", [k for k in FORMATS if k != "jsonl"])
def test_every_format_builds_the_bytes_of_its_jsonl(tmp_path, small_tokenizer_dir, jsonl_build, kind):
    """The same rows as jsonl, json array, JSON Lines named .json, csv, tsv, .bz2, .xz, parquet, arrow, HF: the
    same .bin/.idx, byte for byte (one output per language)."""
    assert len(jsonl_build) == 6
    assert _built(tmp_path, small_tokenizer_dir, write_rows(tmp_path, kind), kind) == jsonl_build


def test_json_files_are_told_apart_by_their_first_byte(tmp_path):
    array = tmp_path / "a.json"
    array.write_bytes(BOM + b"\n  \n" + json.dumps([{"text": "x"}, {"text": "y"}]).encode())
    lines = tmp_path / "l.json"
    lines.write_bytes(b"\n" + _jsonl_bytes([{"text": "x"}, {"text": "y"}]))
    assert format_of(str(array)) == "json" and format_of(str(lines)) == "jsonl"
    assert format_of(str(tmp_path / "x.jsonl")) == "jsonl"  # no read: .jsonl is only JSON Lines
    assert [d.text for d in _read_all(SourceConfig(paths=[str(array)]))] == ["x", "y"]
    assert [d.text for d in _read_all(SourceConfig(paths=[str(lines)])) if isinstance(d, Document)] == ["x", "y"]


def test_json_array_elements_and_damage(tmp_path):
    """Non-object elements are rows rejected one by one; broken JSON ends the array with one reject after every
    element read before it; a large element and one split across read chunks parse whole."""
    big = "é" * (3 << 20)  # longer than a read chunk: parsed across several
    path = tmp_path / "x.json"
    path.write_text(json.dumps([{"text": "a"}, 5, {"body": "b"}, {"text": big}, {"text": ""}]) + "\n")
    got = [(type(i).__name__, i.line, getattr(i, "reason", None)) for i in _read_all(SourceConfig(paths=[str(path)]))]
    assert got == [("Document", 1, None), ("Reject", 2, "malformed_json"), ("Reject", 3, "missing_text"),
                   ("Document", 4, None), ("Reject", 5, "empty_text")]
    assert _read_all(SourceConfig(paths=[str(path)]))[3].text == big
    broken = tmp_path / "broken.json"
    broken.write_text('[{"text": "a"}, {"text": "b"} {"text": "c"}]')
    items = _read_all(SourceConfig(paths=[str(broken)]))
    assert [type(i).__name__ for i in items] == ["Document", "Document", "Reject"]
    assert items[2].reason == "malformed_json" and items[2].line == 3 and "nothing after" in items[2].detail
    for max_rows in (1, 2):  # row ranges count the reject as a row, once
        assert [(type(i).__name__, i.line) for i in _read_all(SourceConfig(paths=[str(broken)]), max_rows)] == \
            [("Document", 1), ("Document", 2), ("Reject", 3)]
    empty = tmp_path / "empty.json"
    empty.write_text("[ ]")
    assert _read_all(SourceConfig(paths=[str(empty)])) == []


def test_a_large_json_array_or_csv_is_one_shard_listed_as_uncut(tmp_path):
    array = write_rows(tmp_path, "json-array")
    table = write_rows(tmp_path, "csv")
    plan = shard_plan([SourceConfig(paths=[array]), SourceConfig(paths=[table])], shard_bytes=10_000)
    assert [s.byte_range for s in plan.shards] == [None, None] and plan.unsplittable == [array, table]


def test_csv_quoting_short_records_and_columns(tmp_path):
    path = tmp_path / "x.csv"
    path.write_bytes(b'id,text,lang\n1,"two\nlines, with a comma",en\n\n2\n3,"",fr\n4,"say ""hi""",\n')
    items = _read_all(SourceConfig(paths=[str(path)]))
    got = [(type(i).__name__, i.line, getattr(i, "text", getattr(i, "reason", None))) for i in items]
    assert got == [("Document", 1, "two\nlines, with a comma"), ("Reject", 2, "missing_text"),
                   ("Reject", 3, "empty_text"), ("Document", 4, 'say "hi"')]
    assert [items[0].lang, items[3].lang] == ["en", ""]
    with pytest.raises(BloomstackError, match=r"x\.csv: no column 'body' in the header .*text_field"):
        _read_all(SourceConfig(paths=[str(path)], text_field="body"))
    tsv = tmp_path / "x.tsv"
    tsv.write_text("content\tlanguage\nhallo welt\tde\n")
    assert [(d.text, d.lang) for d in _read_all(SourceConfig(paths=[str(tsv)], text_field="content",
                                                               lang_field="language"))] == [("hallo welt", "de")]


@pytest.mark.parametrize("codec", ["bz2", "xz"])
def test_truncated_bz2_and_xz_keep_the_rows_before_the_damage(tmp_path, codec):
    compress = bz2.compress if codec == "bz2" else lzma.compress
    data = b"".join(compress(_jsonl_bytes(ROWS[i:i + 100])) for i in range(0, len(ROWS), 100))  # 11 streams
    path = tmp_path / f"x.jsonl.{codec}"
    path.write_bytes(data[: len(data) // 2])
    items = _read_all(SourceConfig(paths=[str(path)]))
    docs = [i for i in items if isinstance(i, Document)]
    assert 400 <= len(docs) < 600 and [d.text for d in docs] == [r["text"] for r in ROWS[:len(docs)]]
    assert isinstance(items[-1], Reject) and items[-1].reason == "corrupt_file" and items[-1].line == len(docs) + 1
    text = tmp_path / f"t.txt.{codec}"
    text.write_bytes(compress(b"one document\n"))
    assert [d.text for d in _read_all(SourceConfig(paths=[str(text)]))] == ["one document\n"]


def test_dotted_text_field_reads_nested_objects_and_struct_columns(tmp_path):
    rows = [{"meta": {"content": f"doc {i}", "lang": "fr"}, "id": i} for i in range(5)]
    rows[3] = {"meta": None, "id": 3}
    paths = [write_rows(tmp_path, kind, rows, name=kind) for kind in ("jsonl", "json-array", "parquet", "arrow-file")]
    for path in paths:
        items = _read_all(SourceConfig(paths=[path], text_field="meta.content", lang_field="meta.lang"))
        assert [(getattr(i, "text", None), getattr(i, "lang", None)) for i in items] == \
            [("doc 0", "fr"), ("doc 1", "fr"), ("doc 2", "fr"), (None, None), ("doc 4", "fr")], path
        assert items[3].reason == "missing_text"
    flat = tmp_path / "flat.jsonl"  # a key holding the dot is read as it is
    flat.write_text('{"meta.content": "literal", "meta": {"content": "nested"}}\n')
    assert [d.text for d in _read_all(SourceConfig(paths=[str(flat)], text_field="meta.content"))] == ["literal"]
    with pytest.raises(BloomstackError, match="no column 'meta.title'"):
        _read_all(SourceConfig(paths=[paths[2]], text_field="meta.title"))


class LinesReader(Reader):
    """A user's format: every non-empty line of a ``.lines`` file is one document (for the plugin test)."""

    name = "lines"
    suffixes = (".lines",)

    def read(self, shard: Shard) -> Iterator[Document | Reject]:
        with open_bytes(shard.path) as fh:
            for number, line in enumerate(fh, start=1):
                if shard.start < number and (shard.stop is None or number <= shard.stop):
                    yield validate_row(line.decode().rstrip("\n"), None, shard, number)


def test_a_users_reader_named_module_class(tmp_path, small_tokenizer_dir):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.lines").write_text("first\nsecond\n\nthird\n")
    (tmp_path / "in" / "skip.jsonl").write_text('{"text": "not mine"}\n')
    target = f"{__name__}:LinesReader"
    source = SourceConfig(paths=[str(tmp_path / "in")], format=target, lang="en")
    items = _read_all(source)
    assert [getattr(i, "text", None) for i in items] == ["first", "second", None, "third"]
    assert plan_shards([source])[0].format == target
    assert [i.line for i in _read_all(source, max_rows=2)] == [1, 2, 3, 4]  # counted by reading it
    summary = run_build(derive(_config([tmp_path / "in"], small_tokenizer_dir, tmp_path / "out", workers=0),
                               sources=[source]))
    assert summary.documents == 3 and summary.rejects["empty_text"] == 1
    with pytest.raises(BloomstackError, match=r"^format \(tests.nope:Reader\): cannot import it"):
        _read_all(SourceConfig(paths=[str(tmp_path / "in" / "a.lines")], format="tests.nope:Reader"))
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        SourceConfig(paths=["x"], format="xml")


def test_builtins_are_listed_once_with_distinct_names():
    names = [cls.name for cls in BUILTINS]
    assert len(names) == len(set(names)) == 7
