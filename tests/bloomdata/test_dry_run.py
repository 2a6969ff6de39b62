"""``--dry-run`` on ``bloomdata build``, ``clean`` and ``train-tokenizer``: the plan is printed, nothing is written,
and the plan's figures are the run's (estimated sizes against the files a real run then writes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from bloomdata.cli import main as bloomdata_main
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer


def _plan(capsys, argv: list[str]) -> dict:
    assert bloomdata_main([*argv, "--dry-run", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(path)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.rglob("*"))}


def _two_languages(tmp_path: Path, corpus_dir: Path) -> Path:
    inputs = tmp_path / "in"
    inputs.mkdir()
    for lang in ("en", "fr"):
        (inputs / f"{lang}.jsonl").write_bytes((corpus_dir / f"{lang}.jsonl").read_bytes())
    return inputs


def test_build_dry_run_writes_nothing_and_estimates_the_outputs_a_build_writes(tmp_path, corpus_dir,
                                                                                small_tokenizer_dir, capsys):
    inputs, out = _two_languages(tmp_path, corpus_dir), tmp_path / "data"
    argv = ["build", "--input", f"en={inputs / 'en.jsonl'}", "--input", f"fr={inputs / 'fr.jsonl'}",
            "--tokenizer", str(small_tokenizer_dir), "--out", str(out), "--workers", "0", "--no-progress"]
    plan = _plan(capsys, argv)
    assert not out.exists()  # no output directory, no lock, no shard
    assert [f["path"] for f in plan["inputs"]["files"]] == [str(inputs / "en.jsonl"), str(inputs / "fr.jsonl")]
    assert plan["inputs"]["total_bytes"] == sum(os.path.getsize(inputs / f"{x}.jsonl") for x in ("en", "fr"))
    assert plan["shards"] == 2 and plan["workers"] == "this process" and plan["out_dir_exists"] is False
    estimated = {Path(f["path"]).name: f["bytes"] for f in plan["outputs"] if f["bytes"] is not None}
    assert sorted(estimated) == ["en.bin", "en.idx", "fr.bin", "fr.idx"]

    assert bloomdata_main(argv) == 0
    capsys.readouterr()
    # inputs smaller than the sample are read whole: the estimate is the size the build writes
    assert estimated == {name: os.path.getsize(out / name) for name in estimated}

    before = _tree(out)
    plan = _plan(capsys, argv)
    assert plan["up_to_date"] is True and plan["peak_disk_bytes"] == 0 and plan["shards_done"] == 0
    assert _tree(out) == before  # nothing touched in an existing output directory


def test_build_dry_run_text_names_inputs_outputs_and_sizes(tmp_path, corpus_dir, small_tokenizer_dir, capsys):
    inputs = _two_languages(tmp_path, corpus_dir)
    assert bloomdata_main(["build", "--input", str(inputs), "--tokenizer", str(small_tokenizer_dir),
                           "--out", str(tmp_path / "data"), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("bloomdata build --dry-run: the plan; nothing was written\n")
    assert f"path {inputs / 'en.jsonl'}, bytes {os.path.getsize(inputs / 'en.jsonl'):,} (" in text
    assert "workers: a local Dask cluster of 2 worker processes" in text
    assert f"{tmp_path / 'data' / 'fr.bin'}, bytes " in text and not (tmp_path / "data").exists()


def test_clean_dry_run_writes_nothing_and_bounds_each_part(tmp_path, corpus_dir, capsys):
    inputs, out = _two_languages(tmp_path, corpus_dir), tmp_path / "clean"
    argv = ["clean", "--input", f"en={inputs / 'en.jsonl'}", "--input", str(inputs / "fr.jsonl"), "--out", str(out),
            "--workers", "0", "--no-progress"]
    plan = _plan(capsys, argv)
    assert not out.exists()
    assert plan["shards"] == 2 and plan["inputs"]["total_bytes"] > 0 and plan["peak_disk_bytes"] > 0
    parts = [f for f in plan["outputs"] if "/data/" in f["path"]]
    assert [f["path"].split("/data/")[1].split("/")[0] for f in parts] == ["en", "<lang>"]  # fr's: in its rows
    assert {Path(f["path"]).name for f in plan["outputs"]} >= {"clean_summary.json", "removed.jsonl.zst"}

    assert bloomdata_main(argv) == 0
    capsys.readouterr()
    written = {p.name[:5]: p.stat().st_size for p in (out / "data").rglob("*.jsonl.zst")}
    for part in parts:  # the filters only remove: each part is at most its estimate, and here most of it
        actual = written[Path(part["path"]).name[:5]]
        assert 0.8 * part["bytes"] <= actual <= part["bytes"], (part, actual)


def test_train_tokenizer_dry_run_shows_the_sample_the_training_draws(tmp_path, corpus_dir, capsys):
    inputs, out = _two_languages(tmp_path, corpus_dir), tmp_path / "tok"
    plan = _plan(capsys, ["train-tokenizer", "--input", str(inputs), "--out", str(out), "--vocab-size", "400",
                          "--byte-budget", "60kB", "--quiet"])
    assert not out.exists()
    # the languages' text, counted here from the rows themselves
    for lang in ("en", "fr"):
        rows = [json.loads(line) for line in (inputs / f"{lang}.jsonl").read_text().splitlines()]
        assert plan["text_bytes"][lang] == sum(len(r["text"].encode()) for r in rows)
    assert 60_000 - 2 <= sum(plan["sample_bytes"].values()) <= 60_000  # each share rounded down
    assert plan["trainer"] == "memory"
    report = train_tokenizer(TokenizerTrainConfig(sources=[SourceConfig(paths=[str(inputs)])], out_dir=str(out),
                                                  vocab_size=400, byte_budget=60_000, show_progress=False))
    assert report.bytes_available == plan["text_bytes"] and report.bytes_quota == plan["sample_bytes"]
    assert {Path(f["path"]).name for f in plan["outputs"]} == {p.name for p in out.iterdir()}
