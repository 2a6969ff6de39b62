"""ROOTS's other cleaning steps in bloomdata clean: SimHash near duplicates as ROOTS ran them on OSCAR, the
catalogue's dedup_document key and small-document filters (bigscience-workshop/data-preparation,
01b_oscar_cleaning_and_filtering/deduplicate/ and 01a_catalogue_cleaning_and_filtering/clean_helpers/)."""

from __future__ import annotations

import itertools
import json
import random
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import zstandard

from bloomdata.clean import DATA_DIR, PRESETS, CleanConfig, run_clean
from bloomdata.clean.config import ExactDedupConfig, SimHashConfig
from bloomdata.clean.dedup import JoinTask, _simhash_pairs, components, join
from bloomdata.clean.language import load_word_lists
from bloomdata.clean.minhash import document_key
from bloomdata.clean.quality_filter import QualityFilter
from bloomdata.clean.simhash import SimHasher, fingerprint_of
from bloomdata.config_loader import load_config
from tests.data import CORPUS_DIR


def test_simhash_fingerprint_is_the_bitwise_majority_of_window_hashes():
    hashes = np.array([0b1011, 0b0011, 0b1000], dtype=np.uint64)  # bit 0: 2 of 3, bit 1: 2, bit 3: 2, bit 2: 0
    assert fingerprint_of(hashes) == 0b1011
    assert fingerprint_of(np.array([1 << 63, 0], dtype=np.uint64)) == 0  # a tie is not a majority
    assert fingerprint_of(np.zeros(0, np.uint64)) == 0
    hasher = SimHasher(SimHashConfig())
    # lower-cased, Unicode punctuation removed before windowing: these are one text
    assert (hasher.fingerprint("Hello, World! «Quoted» — text…", "fr")
            == hasher.fingerprint("hello world quoted  text", "fr"))
    assert hasher.fingerprint("abcdef", "fr") == 0  # 6 characters: ROOTS's range(len - 6) has no window
    assert hasher.fingerprint("abcdefg", "fr") != 0
    assert hasher.fingerprint("one two three four five six", "en") == 0  # en: windows of 6 space tokens
    assert len(hasher.bands) == 15  # 6 blocks, distance 4: every 2 of 6 blocks


def test_simhash_join_finds_every_pair_within_the_distance():
    """The band join links what a brute-force comparison links (Manku's pigeonhole): every pair within the
    distance, except that a copy of an equal fingerprint is linked to its first only (same clusters)."""
    rng = np.random.default_rng(0)
    base = rng.integers(0, 2**63, size=60, dtype=np.uint64)
    fps = [base]
    for flips in (0, 1, 3, 4, 5, 8):  # planted neighbours at each distance
        noise = np.zeros(60, np.uint64)
        for j in range(60):
            for bit in rng.choice(64, size=flips, replace=False):
                noise[j] |= np.uint64(1) << np.uint64(bit)
        fps.append(base ^ noise)
    fp = np.concatenate(fps)
    gid = np.arange(len(fp), dtype=np.uint64)
    hasher = SimHasher(SimHashConfig())
    keys = hasher.band_keys(fp)
    found = set()
    for b in range(keys.shape[1]):
        found |= {tuple(p) for p in _simhash_pairs(keys[:, b], fp, gid, 4).tolist()}
    brute = {(j, i) for i, j in itertools.combinations(range(len(fp)), 2)
             if bin(int(fp[i]) ^ int(fp[j])).count("1") <= 4}
    assert found <= brute and len(brute) >= 60 * 4
    for pairs in (found, brute):  # the same clusters, each rooted at its first member
        nodes, roots = components(np.array(sorted(pairs), dtype=np.uint64))
        assert dict(zip(nodes.tolist(), roots.tolist())) == {n: n % 60 for n in nodes.tolist()}


def _kept(out: Path) -> list[str]:
    texts = []
    for part in sorted((out / DATA_DIR).rglob("*.jsonl.zst")):
        data = zstandard.ZstdDecompressor().stream_reader(part.open("rb")).read()
        texts += [json.loads(line)["text"] for line in data.splitlines()]
    return texts


@pytest.fixture(scope="module")
def near_copies(tmp_path_factory) -> Path:
    """fr and vi documents, and for 30 of them a copy with one word changed (a few bits of SimHash)."""
    rng = random.Random(1)
    rows = []
    for lang in ("fr", "vi"):
        with open(CORPUS_DIR / f"{lang}.jsonl", encoding="utf-8") as f:
            rows += [json.loads(line) for line in f][:80]
    for row in rng.sample(rows, 30):
        words = row["text"].split(" ")
        words[len(words) // 2] = "Bonjour"
        rows.append(dict(row, text=" ".join(words)))
    path = tmp_path_factory.mktemp("near") / "in.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_simhash_run_removes_near_copies_for_any_worker_count(tmp_path, near_copies, client):
    def run(out: Path, workers: int, shard_rows: int):
        config = load_config(CleanConfig, PRESETS["roots"], values={
            "sources": [str(near_copies)], "out_dir": str(out), "workers": workers, "progress": False,
            "max_rows_per_shard": shard_rows, "exact_dedup": {"enabled": False}})
        return run_clean(config, client=client if workers else None)

    one = run(tmp_path / "one", 0, 1000)
    many = run(tmp_path / "many", 2, 37)
    # of 30 planted copies (one word changed: 4-8% of a short text's windows, not always within 4 bits)
    assert one.removed["near_duplicate"] == many.removed["near_duplicate"] >= 15
    assert _kept(tmp_path / "one") == _kept(tmp_path / "many") and many.shards.total == 6


def test_dedup_document_key_and_small_document_steps():
    config = ExactDedupConfig(key="roots_document")
    # whitespace, digits and ASCII punctuation do not count; case and other characters do
    assert document_key("Hello, World 2011!", config) == document_key(" Hello\tWorld!!", config)
    assert document_key("Hello World", config) != document_key("hello world", config)
    assert document_key("l’eau", config) != document_key("l'eau", config)

    def check(step: str, text: str) -> str | None:
        config = load_config(CleanConfig, PRESETS["roots"], values={
            "sources": ["x"], "out_dir": "y",
            "quality": {"steps": [step], "defaults": {"min_bytes": 30, "min_space_words": 5}}})
        return QualityFilter(config, *load_word_lists(config.quality)).check(text, "sw")

    assert check("bytes", "é" * 15) is None  # 30 bytes in 15 characters
    assert check("bytes", "é" * 14) == "too_few_bytes"
    assert check("space_words", "a b c d e") is None
    assert check("space_words", "a  b  c") is None  # "a  b  c".split(" "): 5 pieces, two of them empty
    assert check("space_words", "a b c d") == "too_few_space_words"


def _write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def test_template_lines_counted_over_surviving_documents(tmp_path):
    banner = "Accept all cookies on this website"
    rows = [{"text": f"Article {i} is about topic {i * 7} in depth.\n  {banner}  \nShort\nFooter: (c) 2024 Example Inc",
             "lang": "en"} for i in range(12)]
    rows.append({"text": f"{banner}\nFooter: (c) 2024 Example Inc", "lang": "en"})  # all template: emptied
    rows += [rows[0]] * 5  # exact copies go first: their lines do not count
    source = _write_rows(tmp_path / "in.jsonl", rows)

    def run(out: str, occurrences: int):
        config = CleanConfig(sources=[str(source)], out_dir=str(tmp_path / out), workers=0, progress=False,
                             max_rows_per_shard=7, quality={"enabled": False}, near_dedup={"enabled": False},
                             template_dedup={"enabled": True, "min_occurrences": occurrences})
        return run_clean(config), _kept(tmp_path / out)

    summary, kept = run("13", 13)  # the banner and footer occur 13 times in the 13 survivors
    assert summary.removed["exact_duplicate"] == 5 and summary.removed["empty"] == 1 and len(kept) == 12
    assert kept[0] == "Article 0 is about topic 0 in depth.\nShort"  # lines stripped, short ones never templates
    summary, kept = run("14", 14)  # 18 with the copies, 13 without: not templates
    assert summary.removed["empty"] == 0 and kept[0] == f"Article 0 is about topic 0 in depth.\n{banner}\nShort\n" \
                                                         "Footer: (c) 2024 Example Inc"


def test_roots_preset_run_reports_its_settings_and_removals(tmp_path):
    rows = []
    for lang in ("en", "bn", "zh", "sw"):
        with open(CORPUS_DIR / f"{lang}.jsonl", encoding="utf-8") as f:
            rows += [json.loads(line) for line in f][:20]
    # words over 25 characters go first
    rows[0] = dict(rows[0], text=rows[0]["text"] + " Follow @bigscience, card 4111 1111 1111 1111.")
    source = _write_rows(tmp_path / "in.jsonl", rows)
    config = load_config(CleanConfig, PRESETS["roots"],
                         values={"sources": [str(source)], "out_dir": str(tmp_path / "out"), "workers": 0,
                                 "progress": False})
    summary = run_clean(config)
    assert summary.settings_name == "roots" and (summary.keys_redacted, summary.users_redacted) == (1, 1)
    assert summary.languages["bn"].removed["closed_class_words"] >= 5  # ROOTS's bn stopword cut (see test_clean_roots)
    report = (tmp_path / "out" / "clean.md").read_text(encoding="utf-8")
    assert "Settings: **roots**" in report and "Removal rate by reason" in report
    assert "zh: words are single characters: no sentencepiece model was given" in report
    assert "language id off" in report and "perplexity off for bn, en, sw, zh" in report
    bn = next(line for line in report.splitlines() if line.startswith("| bn | 20 |"))
    assert f"{100 * summary.languages['bn'].removed['closed_class_words'] / 20:.1f}%" in bn


@pytest.mark.parametrize("kind, per_entry", [("exact", 110), ("simhash", 110), ("minhash", 80)])
def test_a_join_task_holds_the_bytes_per_entry_its_docs_give(tmp_path, kind, per_entry):
    """near_dedup.docs_per_task is sized from these figures (bloomdata.clean.dedup: ~100 bytes an entry for the
    exact keys and a SimHash band, ~75 for a MinHash band): a join that held more would make a worker's peak grow
    with the corpus, up to that many documents a task."""
    rng, shards, per_shard = np.random.default_rng(0), 4, 15_000
    # stage 1's files: (name, rows, the candidate-number row); row 0 is the key, sorted
    layout = {"exact": ("exact.npy", 3, 2), "minhash": ("minhash.npy", 2, 1), "simhash": ("simhash.npy", 3, 1)}
    name, rows, candidate = layout[kind]
    dirs = []
    for s in range(shards):
        table = rng.integers(0, 2**63, size=(2, rows, per_shard), dtype=np.uint64)  # two bands
        table[:, 0] >>= np.uint64(44 if kind == "simhash" else 0)  # 20-bit band keys: runs to compare
        table[:, 0].sort(axis=-1)  # stage 1 writes each band's keys sorted
        table[:, candidate] = np.arange(per_shard, dtype=np.uint64)
        dirs.append(tmp_path / f"shard{s}")
        dirs[-1].mkdir()
        np.save(dirs[-1] / name, table[0] if kind == "exact" else table)
    task = JoinTask(-1 if kind == "exact" else 1, 0, 1, kind)
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        manifest = join(task, str(tmp_path / "out"), [str(d) for d in dirs], "key", hamming_distance=4)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert manifest.entries == shards * per_shard
    assert peak / manifest.entries <= per_entry, f"{kind}: {peak / manifest.entries:.0f} bytes an entry"
