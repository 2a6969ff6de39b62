"""`bloomdata build` sharding and damaged inputs: the same bytes for any shard size, byte-range shards that
report file line numbers, re-planning when the shard size changes, unsplittable inputs listed in the summary,
truncated compressed inputs counted as one reject each, and user errors in Dask workers as one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bloomdata.build import (
    REJECTS_FILE,
    SHARDS_DIR,
    SUMMARY_FILE,
    BuildSummary,
    format_summary,
    plan_build,
    run_build,
)
from bloomdata.build.summary import ShardCounts
from bloomdata.cli import main as cli_main
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.tokenizer.bpe import load_tokenizer
from tests.bloomdata.build_helpers import (
    LANGS,
    REPO,
    _config,
    _outputs,
)


@pytest.fixture(scope="module")
def mixed_jsonl(tmp_path_factory, big_jsonl) -> Path:
    """~100 KB of mixed-language documents (150): 1 KB shards of it are still a reasonable number of tasks."""
    path = tmp_path_factory.mktemp("mixed") / "mixed.jsonl"
    path.write_text("".join(big_jsonl.read_text().splitlines(keepends=True)[:150]))
    return path


def test_identical_bytes_for_any_shard_size(tmp_path, client, mixed_jsonl, small_tokenizer_dir, monkeypatch):
    """Byte-range shards of 1 KB and 64 KB, the default plan (cut for the worker count), one shard and row
    ranges, on 1 and 2 workers, all write the bytes of the in-process whole-file build."""
    from bloomdata.readers import shards as planning

    size = mixed_jsonl.stat().st_size
    reference_out = tmp_path / "reference"
    run_build(_config([mixed_jsonl], small_tokenizer_dir, reference_out, append_eod=True, workers=0, shard_bytes=0))
    reference = _outputs(reference_out)
    assert len(reference) == 2 * len(LANGS)
    cases = [("1KB", {"shard_bytes": "1KB"}, client, -(-size // 1000)),
             ("1KB-w1", {"shard_bytes": "1KB", "workers": 1}, None, -(-size // 1000)),
             ("64KB", {"shard_bytes": "64KB"}, client, 2),
             ("64KB-w1", {"shard_bytes": "64KB", "workers": 1}, None, 2),
             ("default", {}, client, 8),  # 2 workers: 4 shards each
             ("default-w1", {"workers": 1}, None, 4),
             ("one", {"shard_bytes": 0}, client, 1),
             ("rows", {"max_rows_per_shard": 40}, client, 4)]
    for label, kw, c, n_shards in cases:
        # the default plan cuts this small file only when the floor of its worker-count cut is lowered
        monkeypatch.setattr(planning, "MIN_SPLIT_BYTES", 8000 if label.startswith("default") else 1 << 20)
        summary = run_build(_config([mixed_jsonl], small_tokenizer_dir, tmp_path / label, append_eod=True, **kw),
                            client=c)
        if label.startswith("1KB"):  # a cut at each 1 KB mark, less those that fall in the same line (~670 bytes)
            assert n_shards // 2 < summary.shards.total <= n_shards
        else:
            assert summary.shards.total == n_shards, label
        assert _outputs(tmp_path / label) == reference, label


BYTE_RANGE_BAD = {57: b'{"text": "broken', 58: b'{"text": ""}', 123: b'{"text": 7}', 200: b'{"text": "\xff"}'}


@pytest.fixture()
def bad_rows_jsonl(tmp_path) -> Path:
    """200 lines, bad at 57, 58, 123 and 200 (the last, without a newline); the rest are good documents."""
    lines = [BYTE_RANGE_BAD.get(n, json.dumps({"text": f"document {n} " + "word " * (n % 7)}).encode())
             for n in range(1, 201)]
    path = tmp_path / "bad_rows.jsonl"
    path.write_bytes(b"\n".join(lines))
    return path


def test_byte_range_shards_report_file_line_numbers(tmp_path, client, bad_rows_jsonl, small_tokenizer_dir):
    """Byte-range shards count lines from their own start; rejects.jsonl and --strict (in a worker, and on
    shards reused from a lenient run) still name the file's lines."""
    out = tmp_path / "out"
    config = _config([bad_rows_jsonl], small_tokenizer_dir, out, split_by="none", keep_shards=True, shard_bytes=300)
    summary = run_build(config, client=client)
    assert summary.shards.total > 20 and summary.rejects_total == 4 and summary.documents == 196
    manifests = [json.loads(p.read_text()) for p in (out / SHARDS_DIR).glob("*.done.json")]
    assert sum(m["rows"] for m in manifests) == 200
    assert any(e["line"] < 57 for m in manifests for e in m["reject_examples"])  # local lines in the markers
    examples = [json.loads(line) for line in (out / REJECTS_FILE).read_text().splitlines()]
    assert [(e["line"], e["reason"]) for e in examples] == [
        (57, "malformed_json"), (58, "empty_text"), (123, "non_string_text"), (200, "invalid_utf8")]
    assert [e["where"] for e in examples] == [f"{bad_rows_jsonl}:{n}" for n in (57, 58, 123, 200)]
    # --strict on the reused shards: the first reject in plan order, at its file line
    with pytest.raises(BloomstackError, match=rf"^{bad_rows_jsonl}:57: malformed_json"):
        run_build(derive(config, strict=True), client=client)
    # --strict in the worker: in-process, the first failing shard is the one holding line 57
    with pytest.raises(BloomstackError, match=rf"^{bad_rows_jsonl}:57: malformed_json"):
        run_build(derive(config, strict=True, workers=0, out_dir=str(tmp_path / "w0")))
    # on Dask, whichever shard fails first names its file line
    with pytest.raises(BloomstackError, match=rf"^{bad_rows_jsonl}:(57: malformed_json|58: empty_text|"
                                              r"123: non_string_text|200: invalid_utf8)"):
        run_build(derive(config, strict=True, out_dir=str(tmp_path / "w2")), client=client)


def test_changed_shard_size_replans_and_rebuilds_cleanly(tmp_path, client, mixed_jsonl, small_tokenizer_dir):
    """The byte range is in the shard's name and key: another shard size is another plan, built afresh
    (nothing reused), to the same bytes; the old plan's parts and markers are swept."""
    out = tmp_path / "out"
    config = _config([mixed_jsonl], small_tokenizer_dir, out, keep_shards=True, shard_bytes="50KB")
    first = run_build(config, client=client)
    reference = _outputs(out)
    assert first.shards == ShardCounts(total=3, built=3, reused=0)
    assert run_build(config, client=client).up_to_date
    for shard_bytes, total in [(30_000, 4), (50_000, 3)]:  # and back: the first plan's shards were swept
        changed = run_build(derive(config, shard_bytes=shard_bytes), client=client)
        assert changed.shards == ShardCounts(total=total, built=total, reused=0)
        assert _outputs(out) == reference
        assert (changed.fingerprint == first.fingerprint) == (shard_bytes == 50_000)
        names = {s.name for s in plan_build(derive(config, shard_bytes=shard_bytes)).shards}
        assert {p.name.removesuffix(".done.json") for p in (out / SHARDS_DIR).iterdir()} == names
        assert len(list((out / SHARDS_DIR).glob("*.done.json"))) == total


def test_unsplittable_inputs_are_in_the_summary(tmp_path, capsys, mixed_jsonl, small_tokenizer_dir):
    """A compressed input over the shard size stays one shard; the summary (file and printed) says so."""
    import gzip

    (tmp_path / "in").mkdir()
    gz = tmp_path / "in" / "mixed.jsonl.gz"
    gz.write_bytes(gzip.compress(mixed_jsonl.read_bytes()))
    (tmp_path / "in" / "plain.jsonl").write_bytes(mixed_jsonl.read_bytes())
    rc = cli_main(["build", "--input", str(tmp_path / "in"), "--tokenizer", str(small_tokenizer_dir), "--out",
                   str(tmp_path / "out"), "--workers", "0", "--shard-bytes", "40KB", "--no-progress"])
    printed = capsys.readouterr().out
    summary = BuildSummary.model_validate(json.loads((tmp_path / "out" / SUMMARY_FILE).read_text()))
    assert rc == 0 and summary.unsplittable_inputs == [str(gz)] and summary.shard_bytes == 40_000
    assert summary.shards.total == 1 + -(-mixed_jsonl.stat().st_size // 40_000)
    assert printed.strip() == format_summary(summary)
    assert "1 input(s) over 40.0 KB could not be cut into shards" in printed and str(gz) in printed
    assert "large files cut at 40.0 KB" in printed


def _truncated_inputs(directory: Path) -> tuple[list[str], dict[Path, int]]:
    """A good jsonl plus a .jsonl.gz and a .jsonl.zst cut mid-stream; returns the texts a lenient build keeps,
    in plan order (files sorted by path), and each damaged file's number of whole lines before the cut."""
    import gzip
    import zlib

    import zstandard

    texts = [f"document {i}: {' '.join(str(i * j) for j in range(40))}" for i in range(600)]
    body = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    gz = gzip.compress(body)[:6000]
    zst_frame = zstandard.ZstdCompressor().compress
    zst = b"".join(zst_frame(body[i:i + 4096]) for i in range(0, len(body), 4096))[:9000]  # frames of 4 KiB
    whole = {}
    for name, data, prefix in [
        ("broken.jsonl.gz", gz, zlib.decompressobj(wbits=31).decompress(gz)),
        ("broken.jsonl.zst", zst, _zstd_prefix(zst)),
    ]:
        (directory / name).write_bytes(data)
        whole[directory / name] = prefix.count(b"\n")
        assert 0 < whole[directory / name] < len(texts)
    (directory / "good.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:50]))
    kept = texts[:whole[directory / "broken.jsonl.gz"]] + texts[:whole[directory / "broken.jsonl.zst"]] + texts[:50]
    return kept, whole


def _zstd_prefix(data: bytes) -> bytes:
    """What zstandard decodes of a (possibly cut) multi-frame stream: one decompressobj per frame."""
    import zstandard

    decoded = b""
    while data:
        obj = zstandard.ZstdDecompressor().decompressobj()
        decoded += obj.decompress(data)
        data = obj.unused_data
    return decoded


@pytest.mark.parametrize("max_rows", [None, 40])
def test_truncated_compressed_inputs_are_one_reject_each_and_the_build_goes_on(tmp_path, client, max_rows,
                                                                                small_tokenizer_dir):
    """Lenient: the rows before the damage are built, the rest of each damaged file is ONE corrupt_file reject
    naming the line where reading stopped; also when the planner counts the files to cut them into row
    ranges. --strict refuses them with one line naming file:line."""
    (tmp_path / "in").mkdir()
    kept, whole = _truncated_inputs(tmp_path / "in")
    out = tmp_path / "out"
    config = _config([tmp_path / "in"], small_tokenizer_dir, out, split_by="none", max_rows_per_shard=max_rows)
    run_build(config, client=client)
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert summary["rejects"]["corrupt_file"] == summary["rejects_total"] == 2
    assert summary["documents"] == len(kept)
    tok = load_tokenizer(small_tokenizer_dir)
    ds = IndexedDataset(out / "all")
    assert [ds[i].tolist() for i in range(len(ds))] == [e.ids for e in tok.encode_batch(kept, add_special_tokens=False)]
    examples = [json.loads(line) for line in (out / REJECTS_FILE).read_text().splitlines()]
    assert [(e["where"], e["reason"]) for e in examples] == [(f"{p}:{n + 1}", "corrupt_file") for p, n in whole.items()]
    assert all("cannot decompress" in e["detail"] for e in examples)

    either = "|".join(f"{p}:{n + 1}" for p, n in whole.items())  # whichever shard fails first
    with pytest.raises(BloomstackError, match=rf"^({either}): corrupt_file") as err:
        run_build(derive(config, strict=True, out_dir=str(tmp_path / "strict")), client=client)
    assert "\n" not in str(err.value)


@pytest.mark.integration
def test_user_errors_in_dask_workers_are_one_line_without_tracebacks(tmp_path, small_tokenizer_dir):
    """A BloomstackError raised inside a worker task (a parquet file without the text column; --strict on a
    truncated file) reaches the user as one line and exit code 2: no "Compute Failed" dump from the worker's
    logging, no traceback."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"content": ["a", "b"]}), tmp_path / "no_text.parquet")
    (tmp_path / "in").mkdir()
    _, whole = _truncated_inputs(tmp_path / "in")
    gz = tmp_path / "in" / "broken.jsonl.gz"
    for args, needle in [
        ([tmp_path / "no_text.parquet"], "no_text.parquet: no column 'text'"),
        ([gz, "--strict"], f"{gz}:{whole[gz] + 1}: corrupt_file"),
    ]:
        cmd = [sys.executable, "-m", "bloomdata.cli", "build", "--input", *map(str, args), "--tokenizer",
               str(small_tokenizer_dir), "--out", str(tmp_path / "out"), "--workers", "2", "--no-progress"]
        proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == [proc.stderr.strip()] and needle in proc.stderr, proc.stderr
        assert proc.stderr.startswith("bloomdata build: error: ")
