"""`bloomdata build`: tokens equal the tokenizer's own encoding, megatron-core reads the files, bytes are
identical for 1/2/4 workers and any sharding (byte ranges of any size, row ranges, whole files), byte-range
shards report file line numbers, crashes (a killed worker, a SIGKILLed build, a lost marker) rerun to the same
bytes, and every bad input is counted, rejected or refused with a one-line error.

One 2-worker LocalCluster (processes) is shared by the module; the 1- and 4-worker builds start their own.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bloomdata import durable
from bloomdata.build import (
    REJECTS_FILE,
    SHARDS_DIR,
    SUMMARY_FILE,
    BuildConfig,
    BuildSummary,
    format_summary,
    plan_build,
    run_build,
)
from bloomdata.build.summary import ShardCounts
from bloomdata.cli import main as cli_main
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.readers import REJECT_REASONS, SourceConfig
from bloomdata.tokenizer.bpe import load_tokenizer

LANGS = ("en", "fr", "zh", "ar")
REPO = Path(__file__).resolve().parents[2]
BIG_ROWS, BIG_SHARD_ROWS = 4 * (160 + 160 + 146 + 160), 300
BIG_SHARDS = -(-BIG_ROWS // BIG_SHARD_ROWS)  # 9


@pytest.fixture(scope="module")
def client():
    from bloomdata.build.executor import dask_client

    with dask_client(2) as c:  # the build's own cluster setup (and its environment restore on exit)
        yield c


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory, corpus_dir) -> Path:
    """Four languages of the test corpus (160, 160, 146, 160 documents)."""
    out = tmp_path_factory.mktemp("corpus")
    for lang in LANGS:
        (out / f"{lang}.jsonl").write_bytes((corpus_dir / f"{lang}.jsonl").read_bytes())
    return out


@pytest.fixture(scope="module")
def big_jsonl(tmp_path_factory, corpus_dir) -> Path:
    """~3 MB, 2,400 documents of mixed languages (repeated and shuffled): shards that take long enough
    (~0.2-0.5 s each) to be interrupted."""
    rows = [line for lang in LANGS for line in (corpus_dir / f"{lang}.jsonl").read_text().splitlines()]
    rows = rows * 4
    random.Random(0).shuffle(rows)
    assert len(rows) == BIG_ROWS
    path = tmp_path_factory.mktemp("big") / "mixed.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


def _config(inputs, tok, out, **kw) -> BuildConfig:
    sources = [SourceConfig(paths=[str(p)]) for p in inputs]
    return BuildConfig(sources=sources, tokenizer=str(tok), out_dir=str(out), progress=False, **kw)


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in (".bin", ".idx")}


def _temps(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if ".tmp-" in p.name]


@pytest.fixture(scope="module")
def reference_big(tmp_path_factory, big_jsonl, small_tokenizer_dir) -> dict[str, bytes]:
    """The big file built in-process (no Dask): what every interrupted build must reproduce."""
    out = tmp_path_factory.mktemp("ref_big")
    run_build(_config([big_jsonl], small_tokenizer_dir, out, append_eod=True, workers=0,
                      max_rows_per_shard=BIG_SHARD_ROWS))
    return _outputs(out)


def test_tokens_equal_direct_encoding_and_megatron_reads(tmp_path, client, small_corpus, small_tokenizer_dir):
    from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset

    summary = run_build(_config([small_corpus], small_tokenizer_dir, tmp_path, append_eod=True,
                                max_rows_per_shard=70), client=client)
    tok = load_tokenizer(small_tokenizer_dir)
    assert isinstance(summary, BuildSummary) and sorted(summary.outputs) == sorted(LANGS)
    assert summary.dtype == "uint16" and summary.shards == ShardCounts(total=12, built=12, reused=0)
    for lang in LANGS:
        texts = [json.loads(line)["text"] for line in (small_corpus / f"{lang}.jsonl").read_text().splitlines()]
        ds = IndexedDataset(tmp_path / lang)
        theirs = MegatronIndexedDataset(str(tmp_path / lang))
        assert len(ds) == len(texts) == ds.num_documents == len(theirs)
        np.testing.assert_array_equal(theirs.document_indices, np.arange(len(texts) + 1))
        np.testing.assert_array_equal(theirs.sequence_lengths, ds.sizes)
        assert theirs.index.dtype == np.uint16
        for i, text in enumerate(texts):
            expected = tok.encode(text, add_special_tokens=False).ids + [2]  # </s> = 2
            assert ds[i].tolist() == expected, (lang, i)
            if i % 40 == 0:
                np.testing.assert_array_equal(theirs[i], ds[i])
        out = summary.outputs[lang]
        assert out.documents == len(texts) and out.tokens == int(ds.sizes.sum())
    on_disk = json.loads((tmp_path / SUMMARY_FILE).read_text())
    assert on_disk["tokens"] == summary.tokens == sum(o.tokens for o in summary.outputs.values())
    assert on_disk["rejects_total"] == 0 and set(on_disk["rejects"]) == set(REJECT_REASONS)
    # build_summary.json holds the same fields and values as the returned model, plus the marker's key
    assert on_disk == {"key": summary.fingerprint, **summary.model_dump(mode="json")}
    assert list(on_disk)[0] == "key" and len(summary.fingerprint) == 32
    assert summary.throughput_mb_s > 0 and summary.tokens_per_s > 0
    assert not (tmp_path / SHARDS_DIR).exists() and not _temps(tmp_path)


def test_identical_bytes_for_any_worker_count_and_sharding(tmp_path, client, small_corpus, small_tokenizer_dir):
    """1 and 4 workers (their own LocalClusters), the shared 2-worker cluster (as a Client and by its
    scheduler address) and in-process all write the same bytes; so do whole-file and row-range shards."""
    results = {}
    for label, kw, c in [("w1", {"workers": 1, "max_rows_per_shard": 40}, None),
                         ("w2", {"max_rows_per_shard": 40}, client),
                         ("scheduler", {"scheduler": client.scheduler.address, "max_rows_per_shard": 40}, None),
                         ("w4", {"workers": 4, "max_rows_per_shard": 40}, None),
                         ("w0-files", {"workers": 0}, None)]:
        run_build(_config([small_corpus], small_tokenizer_dir, tmp_path / label, **kw), client=c)
        results[label] = _outputs(tmp_path / label)
    assert len(results["w1"]) == 2 * len(LANGS)
    for label in ("w2", "scheduler", "w4", "w0-files"):
        assert results[label] == results["w1"], label
    # one output for everything (split_by none): the languages concatenated in plan order (sorted paths)
    run_build(_config([small_corpus], small_tokenizer_dir, tmp_path / "one", split_by="none",
                      max_rows_per_shard=40), client=client)
    merged = IndexedDataset(tmp_path / "one" / "all")
    parts = [IndexedDataset(tmp_path / "w1" / lang) for lang in sorted(LANGS)]
    assert len(merged) == sum(len(p) for p in parts)
    np.testing.assert_array_equal(merged.sizes, np.concatenate([p.sizes for p in parts]))
    assert (tmp_path / "one" / "all.bin").read_bytes() == b"".join(
        (tmp_path / "w1" / f"{lang}.bin").read_bytes() for lang in sorted(LANGS))


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
        run_build(config.model_copy(update={"strict": True}), client=client)
    # --strict in the worker: in-process, the first failing shard is the one holding line 57
    with pytest.raises(BloomstackError, match=rf"^{bad_rows_jsonl}:57: malformed_json"):
        run_build(config.model_copy(update={"strict": True, "workers": 0, "out_dir": str(tmp_path / "w0")}))
    # on Dask, whichever shard fails first names its file line
    with pytest.raises(BloomstackError, match=rf"^{bad_rows_jsonl}:(57: malformed_json|58: empty_text|"
                                              r"123: non_string_text|200: invalid_utf8)"):
        run_build(config.model_copy(update={"strict": True, "out_dir": str(tmp_path / "w2")}), client=client)


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
        changed = run_build(config.model_copy(update={"shard_bytes": shard_bytes}), client=client)
        assert changed.shards == ShardCounts(total=total, built=total, reused=0)
        assert _outputs(out) == reference
        assert (changed.fingerprint == first.fingerprint) == (shard_bytes == 50_000)
        names = {s.name for s in plan_build(config.model_copy(update={"shard_bytes": shard_bytes})).shards}
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


def test_killed_worker_mid_build_reruns_to_identical_bytes(tmp_path, client, big_jsonl, small_tokenizer_dir,
                                                           reference_big):
    """SIGKILL the worker process while it writes a shard (its pid is in the temp file's name): Dask
    reruns the task elsewhere, the rerun starts that shard afresh, the bytes are unchanged."""
    config = _config([big_jsonl], small_tokenizer_dir, tmp_path, append_eod=True,
                     max_rows_per_shard=BIG_SHARD_ROWS)
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(summary=run_build(config, client=client)))
    thread.start()
    killed = None
    deadline = time.time() + 60
    while killed is None and thread.is_alive() and time.time() < deadline:
        for tmp in (tmp_path / SHARDS_DIR).glob("*/*.bin.tmp-*"):
            pid = int(tmp.name.split(durable.TEMP_INFIX)[1].split("-")[0])  # <name>.tmp-<pid>-<random>
            if pid != os.getpid():
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
        time.sleep(0.005)
    thread.join(120)
    assert killed is not None, "the build finished before a worker could be killed"
    assert result["summary"].shards.built == BIG_SHARDS
    assert _outputs(tmp_path) == reference_big
    assert not _temps(tmp_path)


def test_sigkilled_build_process_reruns_only_unfinished_shards(tmp_path, client, big_jsonl, small_tokenizer_dir,
                                                                reference_big):
    """Byte-range shards (the default way of cutting a large file) resume from their markers, and give the
    bytes of the row-range reference."""
    shard_bytes = big_jsonl.stat().st_size // 8  # under MIN_SPLIT_BYTES: the plan is the same for any workers
    config = _config([big_jsonl], small_tokenizer_dir, tmp_path, append_eod=True, shard_bytes=shard_bytes)
    shards = plan_build(config).shards
    assert len(shards) == 9 and all(s.byte_range for s in shards)
    cmd = [sys.executable, "-m", "bloomdata.cli", "build", "--input", str(big_jsonl), "--tokenizer",
           str(small_tokenizer_dir), "--out", str(tmp_path), "--workers", "1", "--append-eod",
           "--shard-bytes", str(shard_bytes), "--keep-shards", "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 90
        while not list((tmp_path / SHARDS_DIR).glob("*.done.json")) and time.time() < deadline:
            assert proc.poll() is None, "the build exited before it could be killed"
            time.sleep(0.005)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the build and its LocalCluster workers (one session)
        proc.wait(30)
    assert not (tmp_path / SUMMARY_FILE).exists(), "the build finished before it was killed"
    finished = len(list((tmp_path / SHARDS_DIR).glob("*.done.json")))
    assert 1 <= finished < len(shards)
    assert not any(p.suffix in (".bin", ".idx") for p in tmp_path.iterdir())  # nothing merged, nothing half
    summary = run_build(config, client=client)
    assert summary.shards == ShardCounts(total=len(shards), built=len(shards) - finished, reused=finished)
    assert _outputs(tmp_path) == reference_big
    assert not _temps(tmp_path)


def test_lost_marker_stray_temp_and_changed_inputs(tmp_path, client, small_corpus, small_tokenizer_dir):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for lang in LANGS:
        (corpus / f"{lang}.jsonl").write_bytes((small_corpus / f"{lang}.jsonl").read_bytes())
    out = tmp_path / "out"
    config = _config([corpus], small_tokenizer_dir, out, keep_shards=True)
    first = run_build(config, client=client)
    reference = _outputs(out)
    again = run_build(config, client=client)
    assert again.up_to_date and again.fingerprint == first.fingerprint and not first.up_to_date

    # a crash before the merge: one marker lost, a stray temp file, no outputs yet
    markers = sorted((out / SHARDS_DIR).glob("*.done.json"))
    markers[1].unlink()
    (out / SHARDS_DIR / markers[2].name.removesuffix(".done.json") / "x.bin.tmp-999999").write_bytes(b"junk")
    (out / "en.bin.tmp-999999").write_bytes(b"junk")
    for p in [*out.glob("*.bin"), *out.glob("*.idx"), out / SUMMARY_FILE]:
        p.unlink()
    rerun = run_build(config, client=client)
    assert rerun.shards == ShardCounts(total=4, built=1, reused=3)
    assert _outputs(out) == reference and not _temps(out)

    # a changed input file (size and mtime) is rebuilt, never reused; the others are reused
    with open(corpus / "fr.jsonl", "a") as f:
        f.write(json.dumps({"text": "Une phrase de plus.", "lang": "fr"}) + "\n")
    changed = run_build(config, client=client)
    assert changed.shards == ShardCounts(total=4, built=1, reused=3)
    assert changed.outputs["fr"].documents == 161
    # a different setting (append_eod) changes every key
    eod = run_build(config.model_copy(update={"append_eod": True}), client=client)
    assert eod.shards.built == 4
    assert eod.tokens == changed.tokens + changed.documents


BAD_LINES = [
    b'{"text": "good one", "lang": "en"}',
    b'{"text": "broken json", ',
    b'{"text": "bad \xff\xfe utf8"}',
    b'{"lang": "en"}',
    b'{"text": 42}',
    b'{"text": ""}',
    b'{"text": "good two", "lang": "en"}',
]


@pytest.fixture()
def bad_input(tmp_path) -> Path:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(BAD_LINES) + b"\n")
    return path


def test_bad_rows_are_counted_and_examples_written(tmp_path, client, bad_input, small_tokenizer_dir):
    out = tmp_path / "out"
    config = _config([bad_input], small_tokenizer_dir, out, split_by="none", keep_shards=True)
    summary = run_build(config, client=client)
    assert summary.rejects == {"malformed_json": 1, "invalid_utf8": 1, "missing_text": 1,
                                  "non_string_text": 1, "empty_text": 1, "corrupt_file": 0}
    assert summary.documents == 2 and IndexedDataset(out / "all").num_documents == 2
    examples = [json.loads(line) for line in (out / REJECTS_FILE).read_text().splitlines()]
    assert [e["where"] for e in examples] == [f"{bad_input}:{n}" for n in (2, 3, 4, 5, 6)]
    assert [e["reason"] for e in examples] == ["malformed_json", "invalid_utf8", "missing_text",
                                               "non_string_text", "empty_text"]
    # --strict refuses the same inputs even when the build is up to date and its shards are reused
    with pytest.raises(BloomstackError, match=rf"{bad_input}:2: malformed_json"):
        run_build(config.model_copy(update={"strict": True}), client=client)


def test_strict_fails_naming_file_line_through_dask(tmp_path, client, bad_input, small_tokenizer_dir):
    out = tmp_path / "out"
    with pytest.raises(BloomstackError, match=rf"{bad_input}:2: malformed_json"):
        run_build(_config([bad_input], small_tokenizer_dir, out, strict=True), client=client)
    assert not [p for p in out.rglob("*") if p.suffix in (".bin", ".idx")] and not _temps(out)


def _cli(capsys, *args) -> tuple[int, str]:
    rc = cli_main(["build", *map(str, args)])
    return rc, capsys.readouterr().err.strip()


def test_cli_errors_are_one_line_and_write_nothing(tmp_path, capsys, bad_input, small_tokenizer_dir):
    out = tmp_path / "out"
    rc, err = _cli(capsys, "--input", bad_input, "--tokenizer", small_tokenizer_dir, "--out", out,
                   "--workers", 0, "--strict", "--no-progress")
    assert rc == 2 and len(err.splitlines()) == 1 and f"{bad_input}:2" in err
    assert not [p for p in out.rglob("*") if p.suffix in (".bin", ".idx")] and not _temps(out)

    for args, needle in [
        (["--input", tmp_path / "missing.jsonl", "--tokenizer", small_tokenizer_dir], "missing.jsonl"),
        (["--input", bad_input, "--tokenizer", tmp_path / "no_tokenizer"], "no_tokenizer"),
    ]:
        rc, err = _cli(capsys, *args, "--out", tmp_path / "never", "--workers", 0)
        assert rc == 2 and len(err.splitlines()) == 1 and needle in err, err
        assert not (tmp_path / "never").exists()

    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    rc, err = _cli(capsys, "--input", bad_input, "--tokenizer", small_tokenizer_dir, "--out", blocker / "sub",
                   "--workers", 0)
    assert rc == 2 and len(err.splitlines()) == 1 and "a_file" in err and "--out" in err
    rc, err = _cli(capsys, "--input", bad_input, "--out", tmp_path / "x")
    assert rc == 2 and "--tokenizer" in err
    rc, err = _cli(capsys, "--input", bad_input, "--tokenizer", small_tokenizer_dir, "--out", tmp_path,
                   "--workers", 0)  # the outputs would be read back as inputs on a rerun
    assert rc == 2 and "holds an input" in err and not list(tmp_path.glob("*.bin"))


def test_cli_config_yaml_with_flag_overrides(tmp_path, capsys, small_corpus, small_tokenizer_dir):
    config = tmp_path / "build.yaml"
    config.write_text(f"""
sources:
  - paths: ["{small_corpus}/en.jsonl"]
    lang: english
tokenizer: {small_tokenizer_dir}
out_dir: {tmp_path / 'from_yaml'}
workers: 0
append_eod: false
""")
    rc = cli_main(["build", "--config", str(config), "--append-eod", "--no-progress", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert rc == 0 and list(summary["outputs"]) == ["english"] and summary["append_eod"] is True
    assert summary["tokens"] == IndexedDataset(tmp_path / "from_yaml" / "english").num_tokens
    config.write_text("sources: []\ntokenizer: x\nout_dir: y\n")
    rc = cli_main(["build", "--config", str(config)])
    assert rc == 2 and "sources" in capsys.readouterr().err


def test_local_cluster_leaves_this_process_environment_alone(monkeypatch):
    """distributed's Nanny sets OMP_NUM_THREADS=1 (and MKL_/OPENBLAS_...) in the parent before each spawn; after
    a build, this process's index builders and BLAS must get their threads back."""
    from bloomdata.build.executor import dask_client

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    with dask_client(1) as c:
        assert c.submit(os.environ.get, "OMP_NUM_THREADS").result(60) == "1"  # the workers keep theirs
    assert os.environ.get("OMP_NUM_THREADS") is None
    assert os.environ["MKL_NUM_THREADS"] == "3"


def test_run_shards_inside_a_dask_task_uses_that_cluster(client):
    """A Dask worker is daemonic (no LocalCluster of its own): run_shards called from a task, as a Prefect
    task on a DaskTaskRunner would, sends the shards to the same cluster, in input order."""
    import operator

    from bloomdata.build.executor import run_shards

    assert client.submit(run_shards, operator.neg, list(range(7)), pure=False).result(60) == [-i for i in range(7)]


def test_large_vocabulary_builds_int32(tmp_path, small_tokenizer_dir):
    """A vocabulary of >= 65,500 tokens gives int32 data (Megatron's rule); ids above 65,535 survive."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(small_tokenizer_dir / "tokenizer.json"))
    tok.add_tokens([f"<extra_{i}>" for i in range(65_500)])
    tok.save(str(tmp_path / "big.json"))
    texts = ["plain text", "an <extra_65000> id above uint16", "<extra_0><extra_65499>"]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    summary = run_build(_config([tmp_path / "in.jsonl"], tmp_path / "big.json", tmp_path / "out", workers=0,
                                split_by="none", append_eod=True))
    assert summary.dtype == "int32"
    ds, theirs = IndexedDataset(tmp_path / "out" / "all"), MegatronIndexedDataset(str(tmp_path / "out" / "all"))
    assert theirs.index.dtype == np.int32
    for i, text in enumerate(texts):
        expected = tok.encode(text, add_special_tokens=False).ids + [2]
        assert ds[i].tolist() == theirs[i].tolist() == expected
    assert max(max(ds[i]) for i in range(len(texts))) > 65_535


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
        run_build(config.model_copy(update={"strict": True, "out_dir": str(tmp_path / "strict")}), client=client)
    assert "\n" not in str(err.value)


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
