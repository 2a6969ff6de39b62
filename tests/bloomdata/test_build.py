"""`bloomdata build`: tokens equal the tokenizer's own encoding, megatron-core reads the files, bytes are
identical for 1/2/4 workers and any sharding (byte ranges of any size, row ranges, whole files), byte-range
shards report file line numbers, crashes (a killed worker, a SIGKILLed build, a lost marker) rerun to the same
bytes, and every bad input is counted, rejected or refused with a one-line error.

One 2-worker LocalCluster (processes) is shared by the module; the 1- and 4-worker builds start their own.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from bloomdata.build import (
    REJECTS_FILE,
    SHARDS_DIR,
    SUMMARY_FILE,
    BuildSummary,
    plan_build,
    run_build,
)
from bloomdata.build.summary import ShardCounts
from bloomdata.cli import main as cli_main
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.readers import REJECT_REASONS
from bloomdata.tokenizer.bpe import load_tokenizer
from tests.bloomdata.build_helpers import (
    BIG_SHARD_ROWS,
    BIG_SHARDS,
    LANGS,
    _config,
    _outputs,
    _temps,
    build_killing_a_worker,
)
from tests.harness.kill_midway import kill_after_markers


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


def test_killed_worker_mid_build_reruns_to_identical_bytes(tmp_path, client, big_jsonl, small_tokenizer_dir,
                                                           reference_big):
    """SIGKILL the worker process while it writes a shard (its pid is in the temp file's name): Dask
    reruns the task elsewhere, the rerun starts that shard afresh, the bytes are unchanged."""
    config = _config([big_jsonl], small_tokenizer_dir, tmp_path, append_eod=True,
                     max_rows_per_shard=BIG_SHARD_ROWS)
    summary = build_killing_a_worker(config, client)
    assert summary.shards.built == BIG_SHARDS
    assert _outputs(tmp_path) == reference_big
    assert not _temps(tmp_path)


@pytest.mark.integration
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
    finished = kill_after_markers(cmd, tmp_path / SHARDS_DIR, count=1, timeout_s=90)
    assert not (tmp_path / SUMMARY_FILE).exists(), "the build finished before it was killed"
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
    eod = run_build(derive(config, append_eod=True), client=client)
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
        run_build(derive(config, strict=True), client=client)


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
    from bloomdata.jobs.executor import dask_client

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    with dask_client(1) as c:
        assert c.submit(os.environ.get, "OMP_NUM_THREADS").result(60) == "1"  # the workers keep theirs
    assert os.environ.get("OMP_NUM_THREADS") is None
    assert os.environ["MKL_NUM_THREADS"] == "3"


def test_local_cluster_workers_do_not_import_this_process_main_module(tmp_path, monkeypatch):
    """Spawned workers re-import the parent's __main__ (``python -m flows.rehearsal``: torch, Prefect, the
    trainer; 8.45 s to start 2 workers and 454 MB each, 1.12 s and 70 MB without). A stand-in main script records
    who imports it; the workers must not, and the script stays this process's main afterwards."""
    import types

    from bloomdata.jobs.executor import dask_client

    script = tmp_path / "entry.py"
    script.write_text("import os, pathlib\n"
                      "pathlib.Path(__file__).with_suffix('.imported').write_text(str(os.getpid()))\n")
    main = types.ModuleType("__main__")
    main.__file__, main.__spec__ = str(script), None
    monkeypatch.setitem(sys.modules, "__main__", main)
    with dask_client(1) as c:
        assert c.submit(os.getpid, pure=False).result(60) != os.getpid()
    assert not script.with_suffix(".imported").exists(), "a worker imported the parent's main script"
    assert (main.__file__, main.__spec__) == (str(script), None)


def test_run_shards_inside_a_dask_task_uses_that_cluster(client):
    """A Dask worker is daemonic (no LocalCluster of its own): run_shards called from a task, as a Prefect
    task on a DaskTaskRunner would, sends the shards to the same cluster, in input order."""
    import operator

    from bloomdata.jobs.executor import run_shards

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


def test_our_local_workers_drop_a_heartbeat_lost_as_the_cluster_closes(client):
    """A --strict reject in `bloomdata build` once printed a worker's "Failed to communicate with scheduler
    during heartbeat" traceback after its one-line error: the heartbeat was in flight as our LocalCluster
    closed. Its workers drop that record, and only that one."""
    import logging

    def kept() -> list[bool]:
        logger = logging.getLogger("distributed.worker")
        return [bool(logger.filter(logger.makeRecord(logger.name, logging.ERROR, "worker.py", 1, message, (), None)))
                for message in ("Failed to communicate with scheduler during heartbeat.", "Compute Failed")]

    assert list(client.run(kept).values()) == [[False, True]] * 2


def test_a_finished_task_leaves_its_worker(client):
    """The roots preset's 10 GB clean grew its workers to 260 MB against 198 at 1 GB: while the driver held a
    finished task's future, its worker kept the task, with its own unpickled copy of the step (~0.75 MB: the
    word lists), so a worker held one per shard it had run. run_shards drops each future once it has the
    result: a task sees at most the few finished just before it still on its worker (30 tasks held ~14)."""
    import time

    from bloomdata.jobs import executor

    def held(seconds: float) -> int:  # a local function: pickled by value, as a step is
        from distributed import get_worker

        time.sleep(seconds)
        return sum(ts.state == "memory" for ts in get_worker().state.tasks.values())

    results = executor.run_shards(held, [0.2] * 30, client=client)
    assert max(results) <= 3, results


def test_waiting_for_shards_holds_nothing_per_poll(client):
    """Clean's driver grew to 465 MB at 10 GB (157 shards, 40 minutes): each call of ``distributed.wait(...,
    FIRST_COMPLETED, timeout)`` (one per finished batch, and one per 2 s without any) left one waiting asyncio
    task per unfinished future, since distributed's ``Any`` never cancels them: the driver held (unfinished
    shards x calls) of them, quadratic in the corpus. Now each future has one waiter: here the old loop held
    ~N^2/2 = 800 at once for N = 40 tasks."""
    import asyncio
    import time

    from bloomdata.jobs import executor

    loop = client.loop.asyncio_loop
    pending: list[int] = []
    results = executor.run_shards(time.sleep, [0.05] * 40, client=client,
                                  on_result=lambda i, r: pending.append(len(asyncio.all_tasks(loop))))
    assert results == [None] * 40 and len(pending) == 40
    assert max(pending) < 40 + 20, pending
