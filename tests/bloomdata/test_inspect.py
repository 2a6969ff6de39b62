"""`bloomdata inspect`: counts, dtype, histogram and decoded documents match what was written; a corrupt
dataset is a one-line error; a remote prefix (s3:// on a local S3 server, http:// with range requests) prints what
the local one does, its .idx read whole and its documents by byte range."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bloomdata.cli import main as cli_main
from bloomdata.cli.inspect import length_histogram
from bloomdata.megatron.indexed import IndexedDatasetWriter
from bloomdata.tokenizer.bpe import eod_id, load_tokenizer
from tests.harness.object_stores import forget_filesystems, moto_server, s3_env, serve_http, upload

TEXTS = ["Hello world, this is the first document.", "Deuxième document, en français.", "文字 ✓",
         "short", "A much longer document " * 40]


def _build(prefix, tok_dir) -> list[list[int]]:
    tok = load_tokenizer(tok_dir)
    docs = [tok.encode(t, add_special_tokens=False).ids + [eod_id(tok)] for t in TEXTS]
    with IndexedDatasetWriter(prefix, np.uint16) as w:
        w.add_documents([np.array(d) for d in docs])
    return docs


def test_inspect_reports_counts_histogram_and_decoded_documents(tmp_path, capsys, small_tokenizer_dir):
    prefix = tmp_path / "ds"
    docs = _build(prefix, small_tokenizer_dir)
    lengths = [len(d) for d in docs]

    assert cli_main(["inspect", str(prefix) + ".idx", "--tokenizer", str(small_tokenizer_dir), "--docs", "2",
                     "--chars", "1000"]) == 0
    out = capsys.readouterr().out
    assert "dtype      uint16 (code 8)" in out
    assert f"sequences  {len(docs)}" in out and f"documents  {len(docs)}" in out
    assert f"tokens     {sum(lengths):,}" in out
    assert f"max {max(lengths):,} tokens per sequence" in out
    assert json.dumps(TEXTS[0] + "</s>", ensure_ascii=False) in out  # decoded, EOD visible
    assert json.dumps(TEXTS[1] + "</s>", ensure_ascii=False) in out and "文字" not in out  # only 2 docs

    assert cli_main(["inspect", str(prefix), "--json", "--docs", "5"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["sequences"] == stats["documents"] == len(docs) and stats["tokens"] == sum(lengths)
    assert sum(b["count"] for b in stats["histogram"]) == len(docs)
    for b in stats["histogram"]:
        assert b["count"] == sum(b["lo"] <= n < b["hi"] for n in lengths)
    assert [d["ids"] for d in stats["first_documents"]] == [d[:64] for d in docs]
    assert stats["first_documents"][0]["text"] is None  # no tokenizer: ids only


def test_length_histogram_bins():
    assert length_histogram(np.array([], np.int32)) == []
    assert length_histogram(np.array([3, 4, 7, 8, 100], np.int32)) == [
        (2, 4, 1), (4, 8, 2), (8, 16, 1), (16, 32, 0), (32, 64, 0), (64, 128, 1)]
    assert length_histogram(np.array([0, 1], np.int32)) == [(0, 1, 1), (1, 2, 1)]


def test_inspect_corrupt_dataset_is_one_line_error(tmp_path, capsys, small_tokenizer_dir):
    prefix = tmp_path / "ds"
    _build(prefix, small_tokenizer_dir)
    idx = tmp_path / "ds.idx"
    idx.write_bytes(idx.read_bytes()[:-5])
    assert cli_main(["inspect", str(prefix)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ds.idx" in err and "truncated" in err
    assert cli_main(["inspect", str(tmp_path / "nothing")]) == 2
    assert "nothing.idx" in capsys.readouterr().err


def _inspect(prefix: str, tok_dir, capsys) -> tuple[list[str], dict]:
    """The report (its first line, naming the prefix, left out) and the JSON statistics (less the prefix) of the
    first two documents, decoded."""
    assert cli_main(["inspect", prefix, "--tokenizer", str(tok_dir), "--docs", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"dataset    {prefix.removesuffix('.bin')}"
    assert cli_main(["inspect", prefix, "--tokenizer", str(tok_dir), "--docs", "2", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats.pop("prefix") == prefix.removesuffix(".bin")
    return lines[1:], stats


@pytest.mark.integration
def test_inspect_a_remote_prefix_prints_what_the_local_one_does(tmp_path, capsys, small_tokenizer_dir):
    data = tmp_path / "data"
    data.mkdir()
    docs = _build(data / "en", small_tokenizer_dir)
    local = _inspect(str(data / "en"), small_tokenizer_dir, capsys)
    assert local[1]["documents"] == len(docs) and local[1]["first_documents"][1]["ids"] == docs[1]
    with serve_http(data) as (url, counts):
        assert _inspect(f"{url}/en", small_tokenizer_dir, capsys) == local
        # per run: the .idx whole (one plain GET), then one ranged GET per document shown
        assert counts["GET"] == 2 and counts["GET range"] == 4, counts
    with moto_server() as port, pytest.MonkeyPatch.context() as mp:
        for key, value in s3_env(port).items():
            mp.setenv(key, value)
        upload(port, "bucket", data, "data")
        forget_filesystems()
        assert _inspect("s3://bucket/data/en", small_tokenizer_dir, capsys) == local
        assert _inspect("s3://bucket/data/en.bin", small_tokenizer_dir, capsys) == local
        assert cli_main(["inspect", "s3://bucket/data/nothing"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "s3://bucket/data/nothing.idx: not found" in err, err
    forget_filesystems()
