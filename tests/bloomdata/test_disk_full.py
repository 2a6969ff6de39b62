"""`bloomdata build`, `clean` and `train-tokenizer` on a disk that fills up: one line, exit 2, nothing marked done
that is not complete, and a rerun after freeing space reuses what was finished and writes an undisturbed run's bytes.

The output folder lives on a real 5 MiB tmpfs the test mounts (tests/harness/small_disk.py), filled with a ballast so
that about half of the job's files fit. Build and clean run on a local Dask cluster of 2 workers (the CLI's own), so the
disk fills inside a worker process; the tokenizer trainer runs in the CLI's process (it has no Dask stage).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bloomdata import durable
from bloomdata.build.config import SHARDS_DIR, SUMMARY_FILE
from bloomdata.build.shard import parts_intact
from bloomdata.build.summary import ShardManifest
from bloomdata.clean import run_clean
from bloomdata.clean.config import SUMMARY_FILE as CLEAN_SUMMARY
from bloomdata.clean.config import CleanConfig
from bloomdata.cli import main as cli_main
from bloomdata.readers import SourceConfig
from tests.bloomdata.build_helpers import BIG_SHARD_ROWS, BIG_SHARDS, _outputs
from tests.harness.small_disk import SmallDisk

pytestmark = pytest.mark.integration  # tests/tiers.py

SIZE = r"[\d,]+ bytes(?: \([\d.]+ [kMG]B\))?"


def _run(capfd, *args) -> tuple[int, list[str]]:
    capfd.readouterr()
    rc = cli_main([str(a) for a in args])
    return rc, capfd.readouterr().err.strip().splitlines()


def _full_line(command: str, out: Path, disk: SmallDisk, what: str, then: str) -> re.Pattern[str]:
    return re.compile(rf"bloomdata {command}: error: {out}: disk full on the tmpfs filesystem mounted at {disk.path} "
                      rf"\(tmpfs\): {what} needs (about )?({SIZE}), ({SIZE}) free; free space there or set --out to "
                      rf"another disk, then run the same command again{then}")


def _bytes(size: str) -> int:
    return int(size.split(" ")[0].replace(",", ""))


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_a_build_that_fills_the_disk_resumes_to_the_same_bytes(small_disk, capfd, big_jsonl, small_tokenizer_dir,
                                                               reference_big):
    out = small_disk.path / "out"
    args = ["build", "--input", big_jsonl, "--tokenizer", small_tokenizer_dir, "--out", out, "--append-eod",
            "--workers", 2, "--max-rows-per-shard", BIG_SHARD_ROWS, "--no-progress"]
    outputs = sum(map(len, reference_big.values()))  # 1.6 MB; the shards' parts are as large, and come first
    small_disk.fill(leave=outputs // 2)
    rc, err = _run(capfd, *args)

    assert rc == 2 and len(err) == 1, err
    found = _full_line("build", out, small_disk, "this build",
                       rf" \((\d+) of {BIG_SHARDS} shards done: it reuses them\)").fullmatch(err[0])
    assert found, err[0]
    needed, done = _bytes(found[2]), int(found[4])
    # every marker vouches for parts that are all there, whole
    markers = sorted((out / SHARDS_DIR).glob("*.done.json"))
    for marker in markers:
        manifest = ShardManifest.model_validate(durable.read_json(marker))
        assert all(parts_intact(str(out / SHARDS_DIR / manifest.shard / name), p.bin_bytes, p.idx_bytes)
                   for name, p in manifest.outputs.items())
    assert 1 <= done <= len(markers) < BIG_SHARDS
    rest = 2 * outputs - outputs * done / BIG_SHARDS  # the parts not written yet, then the merged outputs
    assert 0.7 * rest < needed < 1.4 * rest, (needed, rest)

    small_disk.free()
    rc, err = _run(capfd, *args)
    assert rc == 0, err
    summary = json.loads((out / SUMMARY_FILE).read_text())
    assert summary["shards"]["reused"] >= done
    assert summary["shards"]["built"] == BIG_SHARDS - summary["shards"]["reused"]
    assert _outputs(out) == reference_big


def test_a_clean_run_that_fills_the_disk_resumes_to_the_same_bytes(small_disk, capfd, tmp_path, big_jsonl):
    reference = tmp_path / "reference"  # undisturbed, in-process
    run_clean(CleanConfig(sources=[SourceConfig(paths=[str(big_jsonl)])], out_dir=str(reference), progress=False,
                          workers=0, max_rows_per_shard=BIG_SHARD_ROWS))
    out = small_disk.path / "out"
    args = ["clean", "--input", big_jsonl, "--out", out, "--workers", 2, "--max-rows-per-shard", BIG_SHARD_ROWS,
            "--no-progress"]
    small_disk.fill(leave=800_000)  # the filter stage alone writes 1.6 MB here; the whole run peaks at 2.7 MB
    rc, err = _run(capfd, *args)

    assert rc == 2 and len(err) == 1, err
    found = _full_line("clean", out, small_disk, "this clean run",
                       rf" \((\d+) of {BIG_SHARDS} shards filtered done: it reuses them\)").fullmatch(err[0])
    assert found, err[0]
    done = int(found[4])
    markers = list((out / "work" / "filter").glob("*.done.json"))
    assert 1 <= done <= len(markers) < BIG_SHARDS
    assert 1_500_000 < _bytes(found[2]) < 5_000_000  # 2.7 MB at the peak, less what is done

    small_disk.free()
    rc, err = _run(capfd, *args)
    assert rc == 0, err
    summary = json.loads((out / CLEAN_SUMMARY).read_text())
    assert summary["shards"]["reused"] >= done
    ignore = {CLEAN_SUMMARY, "clean.lock", "clean.md", "clean.png"}  # the report says how long each stage took
    assert {k: v for k, v in _files(out).items() if k not in ignore} == \
        {k: v for k, v in _files(reference).items() if k not in ignore}


def test_a_tokenizer_that_does_not_fit_says_how_much_it_needs(small_disk, capfd, corpus_dir, small_tokenizer_dir):
    out = small_disk.path / "tok"
    args = ["train-tokenizer", "--input", corpus_dir, "--out", out, "--vocab-size", 3000, "--byte-budget", 1_000_000,
            "--seed", 0, "--quiet"]
    expected = (small_tokenizer_dir / "tokenizer.json").read_bytes()  # the same settings, trained undisturbed
    small_disk.fill(leave=3 * 4096)  # the small json files fit, tokenizer.json (193 kB) does not
    rc, err = _run(capfd, *args)

    assert rc == 2 and len(err) == 1, err
    found = _full_line("train-tokenizer", out, small_disk, r"the tokenizer \(tokenizer_config.json, "
                       r"special_tokens_map.json, training_report.json, tokenizer.json\)",
                       ": the same sample and settings train the same tokenizer").fullmatch(err[0])
    assert found and not found[1], err[0]  # an exact figure, not an estimate
    assert len(expected) < _bytes(found[2]) < len(expected) + 4096  # every file's bytes
    assert not (out / "tokenizer.json").exists()  # the file that says the directory is complete
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]

    small_disk.free()
    rc, err = _run(capfd, *args)
    assert rc == 0, err
    assert (out / "tokenizer.json").read_bytes() == expected
