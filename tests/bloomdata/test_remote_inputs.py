"""Remote inputs through fsspec (issue 52): s3:// on a local S3-compatible server (moto's), http:// on a local server
with range requests, and any registered protocol (memory://), each building the bytes of the same local files,
cut into the same byte ranges, resumable like local files (a changed object, by ETag, size or mtime, is rebuilt),
with credentials from the environment only: a planted secret key appears in nothing a run writes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

from bloomdata.build import run_build
from bloomdata.errors import BloomstackError
from bloomdata.readers import SourceConfig, plan_shards, read_shard, resolve_files
from tests.bloomdata.build_helpers import REPO, _config, _outputs
from tests.bloomdata.reader_inputs import ROWS, write_rows
from tests.harness.object_stores import (
    PLANTED_SECRET,
    forget_filesystems,
    moto_server,
    s3_env,
    serve_http,
    upload,
)

KINDS = ["jsonl", "jsonl.zst", "json-array", "csv", "parquet", "arrow-file", "arrow-stream"]


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Path:
    """The same rows in several formats, plus a save_to_disk directory (written once)."""
    root = tmp_path_factory.mktemp("local")
    for kind in [*KINDS, "hf"]:
        write_rows(root, kind)
    return root


@pytest.fixture(scope="module")
def s3(local):
    """The local files in s3://corpus/in/ on a local S3 server; the environment points clients at it."""
    with moto_server() as port, pytest.MonkeyPatch.context() as mp:
        for key, value in s3_env(port).items():
            mp.setenv(key, value)
        upload(port, "corpus", local, "in")
        forget_filesystems()
        yield port
    forget_filesystems()


@pytest.fixture(scope="module")
def http(local):
    with serve_http(local) as (url, counts):
        yield url, counts


def _name(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _build(tmp_path, tok, path: str, name: str, **kw) -> dict[str, bytes]:
    out = tmp_path / name
    run_build(_config([path], tok, out, workers=0, append_eod=True, shard_bytes="8KB", **kw))
    return _outputs(out)


@pytest.mark.integration
@pytest.mark.parametrize("kind", KINDS)
def test_s3_and_http_build_the_bytes_of_the_local_file_in_the_same_shards(tmp_path, small_tokenizer_dir, local, s3,
                                                                          http, kind):
    path = write_rows(tmp_path, kind)  # the name the fixture gave it, under the remote roots
    name = os.path.relpath(path, tmp_path)
    urls = {"s3": f"s3://corpus/in/{name}", "http": f"{http[0]}/{name}"}
    reference = _build(tmp_path, small_tokenizer_dir, str(local / name), "local")
    cuts = [(s.start, s.stop, s.byte_range) for s in plan_shards([SourceConfig(paths=[str(local / name)])],
                                                                  shard_bytes=8_000)]
    for protocol, url in urls.items():
        shards = plan_shards([SourceConfig(paths=[url])], shard_bytes=8_000)
        if kind.startswith("arrow"):  # a remote Arrow file is read whole (its batches' sizes need its data)
            assert [(s.start, s.stop, s.byte_range) for s in shards] == [(0, None, None)]
        else:
            assert [(s.start, s.stop, s.byte_range) for s in shards] == cuts, protocol
        assert _build(tmp_path, small_tokenizer_dir, url, protocol) == reference, protocol
    if kind == "jsonl":
        assert len(cuts) > 4 and all(c[2] is not None for c in cuts)
        assert http[1]["GET range"] > 0 and http[1]["GET"] == 0, "http is read by ranged requests only"


@pytest.mark.integration
def test_globs_directories_and_save_to_disk_on_s3(local, s3):
    def names(path):
        return [(_name(p), fmt) for p, fmt in resolve_files(SourceConfig(paths=[path]))]

    assert names("s3://corpus/in/*.json*") == names(str(local / "*.json*")) == [("data.json", "json"),
                                                                                ("data.jsonl", "jsonl"),
                                                                                ("data.jsonl.zst", "jsonl")]
    assert names("s3://corpus/in/") == names(str(local))
    hf = resolve_files(SourceConfig(paths=["s3://corpus/in/data-hf"]))
    assert len(hf) > 1 and all(p.startswith("s3://corpus/in/data-hf/") and f == "arrow" for p, f in hf)
    texts = [d.text for s in plan_shards([SourceConfig(paths=["s3://corpus/in/data-hf"])])
             for d in read_shard(s)]
    assert texts == [r["text"] for r in ROWS]
    with pytest.raises(BloomstackError, match=r"input path not found: s3://corpus/in/nope\*.jsonl"):
        resolve_files(SourceConfig(paths=["s3://corpus/in/nope*.jsonl"]))


@pytest.mark.integration
def test_a_changed_remote_object_is_rebuilt_an_unchanged_one_reused(tmp_path, small_tokenizer_dir, s3, http):
    """Rerun: up to date. Same size, new bytes (a new ETag): its shards are rebuilt, the other file's reused."""
    import boto3

    client = boto3.client("s3")
    for name in ("a.jsonl", "b.jsonl"):
        client.put_object(Bucket="corpus", Key=f"resume/{name}", Body=(local_rows := _rows_bytes(0)))
    config = _config(["s3://corpus/resume/"], small_tokenizer_dir, tmp_path / "out", workers=0, shard_bytes="8KB",
                     keep_shards=True)  # shard parts kept: a rerun may reuse them one by one
    first = run_build(config)
    assert first.shards.built == first.shards.total > 4 and not first.up_to_date
    assert run_build(config).up_to_date
    changed = _rows_bytes(1)
    assert len(changed) == len(local_rows)
    client.put_object(Bucket="corpus", Key="resume/b.jsonl", Body=changed)
    forget_filesystems()  # another process would not have b's old listing cached either
    again = run_build(config)
    assert 0 < again.shards.built < again.shards.total and again.shards.reused == first.shards.total // 2
    served = tmp_path / "served"
    served.mkdir()
    (served / "c.jsonl").write_bytes(local_rows)
    with serve_http(served) as (url, _):
        config = _config([f"{url}/c.jsonl"], small_tokenizer_dir, tmp_path / "out-http", workers=0)
        run_build(config)
        assert run_build(config).up_to_date
        (served / "c.jsonl").write_bytes(changed)  # same size; its ETag and mtime change
        assert not run_build(config).up_to_date


def _rows_bytes(variant: int) -> bytes:
    """ROWS[:300] as jsonl, the texts of ``variant`` differing in one character of every row (same size)."""
    from tests.bloomdata.reader_inputs import _jsonl_bytes

    return _jsonl_bytes([{"text": r["text"].replace("document", "documenT" if variant else "document"),
                          "lang": r["lang"]} for r in ROWS[:300]])


@pytest.mark.integration
@pytest.mark.parametrize("name", ["data.jsonl", "data.parquet"])
def test_fertility_of_s3_and_http_inputs_is_the_local_files(small_tokenizer_dir, local, s3, http, capsys, name):
    """`bloomdata fertility` of the same file on s3:// and http:// prints the local file's table, row for row."""
    from bloomdata import cli

    def table(path: str) -> dict:
        assert cli.main(["fertility", "--tokenizer", str(small_tokenizer_dir), "--input", path, "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    reference = table(str(local / name))
    assert len(reference["rows"]) > 2 and reference["rows"][-1]["tokens"] > 1000  # languages and (all)
    assert table(f"s3://corpus/in/{name}") == reference
    assert table(f"{http[0]}/{name}") == reference


@pytest.mark.integration
def test_clean_and_train_tokenizer_of_s3_and_http_inputs_are_the_local_files(tmp_path, corpus_dir, s3):
    """`clean` keeps the same documents in the same files, `train-tokenizer` writes the same tokenizer.json, whether
    a corpus file (real sentences) is local, on s3:// or on http://."""
    import boto3

    from bloomdata.clean import DATA_DIR, CleanConfig, run_clean
    from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer

    def clean(path: str, out: Path) -> list[tuple[str, bytes]]:
        """The output parts in order, their names less the hash of the input's path (a URL is another name)."""
        run_clean(CleanConfig(sources=[SourceConfig(paths=[path])], out_dir=str(out), progress=False, workers=0,
                              max_rows_per_shard=40))
        return [(re.sub(r"-[0-9a-f]{10}(?=\.jsonl\.zst$)", "", str(p.relative_to(out))), p.read_bytes())
                for p in sorted((out / DATA_DIR).rglob("*")) if p.is_file()]

    def tokenizer(path: str, out: Path) -> bytes:
        train_tokenizer(TokenizerTrainConfig(sources=[SourceConfig(paths=[path])], out_dir=str(out), vocab_size=300,
                                             show_progress=False))
        return (out / "tokenizer.json").read_bytes()

    local_file = corpus_dir / "en.jsonl"
    boto3.client("s3").put_object(Bucket="corpus", Key="real/en.jsonl", Body=local_file.read_bytes())
    kept, tok = clean(str(local_file), tmp_path / "clean-local"), tokenizer(str(local_file), tmp_path / "tok")
    assert len(kept) > 1 and b'"merges"' in tok
    with serve_http(corpus_dir) as (url, _):
        for protocol, remote in {"s3": "s3://corpus/real/en.jsonl", "http": f"{url}/en.jsonl"}.items():
            assert clean(remote, tmp_path / f"clean-{protocol}") == kept, protocol
            assert tokenizer(remote, tmp_path / f"tok-{protocol}") == tok, protocol


@pytest.mark.integration
def test_dask_workers_read_s3(tmp_path, small_tokenizer_dir, local, s3):
    """Two worker processes started with the environment (the endpoint and key) build the local bytes."""
    reference = _build(tmp_path, small_tokenizer_dir, str(local / "data.jsonl"), "local")
    out = tmp_path / "dask"
    run_build(_config(["s3://corpus/in/data.jsonl"], small_tokenizer_dir, out, workers=2, append_eod=True,
                      shard_bytes="8KB"))
    assert _outputs(out) == reference


def test_any_registered_protocol(tmp_path, small_tokenizer_dir, local):
    memory = fsspec.filesystem("memory")
    memory.pipe("/corpus/data.jsonl", (local / "data.jsonl").read_bytes())
    memory.pipe("/corpus/data.csv", (local / "data.csv").read_bytes())
    for name in ("data.jsonl", "data.csv"):
        reference = _build(tmp_path, small_tokenizer_dir, str(local / name), f"local-{name}")
        assert _build(tmp_path, small_tokenizer_dir, f"memory://corpus/{name}", f"memory-{name}") == reference
    assert [_name(p) for p, _ in resolve_files(SourceConfig(paths=["memory://corpus/*"]))] == ["data.csv", "data.jsonl"]


def test_credentials_in_a_url_and_missing_extras_are_one_line(monkeypatch):
    with pytest.raises(BloomstackError) as err:
        plan_shards([SourceConfig(paths=["https://user:hunter2@127.0.0.1:9/x.jsonl"])])
    assert "hunter2" not in str(err.value) and "holds a password" in str(err.value)
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # as without the gcs extra
    forget_filesystems()
    with pytest.raises(BloomstackError, match=r"^reading gs:// needs gcsfs, which is not installed .*; "
                                              r"pip install 'bloomstack\[gcs\]'$"):
        plan_shards([SourceConfig(paths=["gs://bucket/x.jsonl"])])
    forget_filesystems()


@pytest.mark.integration
def test_a_planted_secret_key_appears_in_nothing_the_runs_write(tmp_path, small_tokenizer_dir, s3):
    """build, clean, train-tokenizer and fertility from s3 as commands, and a missing object's error: the secret
    key in the environment is in no output line and no file under their outputs."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    assert env["AWS_SECRET_ACCESS_KEY"] == PLANTED_SECRET
    src = "s3://corpus/in/data.jsonl"
    runs = [
        ["build", "--input", src, "--tokenizer", str(small_tokenizer_dir), "--out", str(tmp_path / "data"),
         "--workers", "0", "--json"],
        ["clean", "--input", f"en={src}", "--out", str(tmp_path / "clean"), "--workers", "0"],
        ["train-tokenizer", "--input", src, "--out", str(tmp_path / "tok"), "--vocab-size", "300", "--workers", "0"],
        ["fertility", "--input", src, "--tokenizer", str(small_tokenizer_dir), "--json"],
        ["build", "--input", "s3://corpus/in/missing.jsonl", "--tokenizer", str(small_tokenizer_dir), "--out",
         str(tmp_path / "missing"), "--workers", "0"],
    ]
    for args in runs:
        done = subprocess.run([sys.executable, "-m", "bloomdata.cli", *args], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == (2 if "missing" in args[2] else 0), done.stderr[-2000:]
        assert PLANTED_SECRET not in done.stdout + done.stderr
    assert done.stderr.strip().endswith("input path not found: s3://corpus/in/missing.jsonl (check the source's "
                                        "paths; globs must match at least one file)")
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(written) > 10
    for out in ("data", "clean", "tok"):  # each of build, clean and train-tokenizer wrote its outputs
        assert any(p.is_relative_to(tmp_path / out) for p in written), out
    assert (tmp_path / "tok" / "tokenizer.json").is_file() and list((tmp_path / "data").glob("*.idx"))
    for path in written:
        data = path.read_bytes()
        assert PLANTED_SECRET.encode() not in data, path
        if path.suffix == ".zst":
            import zstandard

            assert PLANTED_SECRET.encode() not in zstandard.ZstdDecompressor().stream_reader(data).read(), path
    shutil.rmtree(tmp_path / "tok", ignore_errors=True)
