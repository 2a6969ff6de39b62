"""`bloomdata clean` end to end: what it removes (exact duplicates, near duplicates, PII) and keeps (the clean
sentences of every shipped language), that its output is what the build and the tokenizer read, that it is
identical for 1/2/4 workers and any sharding, that a killed run resumes to the same bytes, and that every bad
input is counted or refused like the build does.

One 2-worker LocalCluster (processes) is shared by the module; the 1- and 4-worker runs start their own.
"""

from __future__ import annotations

import io
import json
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import zstandard

from bloomdata.clean import DATA_DIR, REMOVED_FILE, SUMMARY_FILE, CleanConfig, run_clean
from bloomdata.clean.config import NormalizeConfig, PiiConfig
from bloomdata.clean.pii import redact
from bloomdata.clean.text import normalize, word_units
from bloomdata.config_loader import derive, load_config
from bloomdata.errors import BloomstackError
from bloomdata.readers import REJECT_REASONS, SourceConfig, iter_documents
from tests.bloomdata.clean_driver_memory import SIZES
from tests.data import CORPUS_DIR
from tests.harness.kill_midway import kill_after_markers

REPO = Path(__file__).resolve().parents[2]
LANGS = sorted(p.stem for p in CORPUS_DIR.glob("*.jsonl"))
SENTENCE_END = re.compile(r"(?<=[.!?।॥۔。！？])\s+")


@pytest.fixture(scope="module")
def client():
    from bloomdata.jobs.executor import dask_client

    with dask_client(2) as c:
        yield c


def _config(inputs, out, **kw) -> CleanConfig:
    return CleanConfig(sources=[SourceConfig(paths=[str(p)]) for p in inputs], out_dir=str(out), progress=False, **kw)


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def _kept(out: Path) -> dict[str, list[str]]:
    """Output texts per language directory, files in name (= plan) order."""
    kept: dict[str, list[str]] = {}
    for lang_dir in sorted((out / DATA_DIR).iterdir()):
        for part in sorted(lang_dir.iterdir()):
            data = zstandard.ZstdDecompressor().stream_reader(part.open("rb")).read()
            kept.setdefault(lang_dir.name, []).extend(json.loads(line)["text"] for line in data.splitlines())
    return kept


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted((out / DATA_DIR).rglob("*")) if p.is_file()} | \
        {REMOVED_FILE: (out / REMOVED_FILE).read_bytes()}


def _removed(out: Path) -> list[dict]:
    data = zstandard.ZstdDecompressor().stream_reader((out / REMOVED_FILE).open("rb")).read()
    return [json.loads(line) for line in data.decode().splitlines()]


def _change_words(text: str, k: int, rng: random.Random) -> str:
    """A copy with ``k`` words changed (characters, for text without spaces)."""
    words = text.split(" ")
    if len(words) < 10:
        chars = list(text)
        for i in rng.sample(range(len(chars)), k):
            chars[i] = rng.choice("甲乙丙丁戊己庚辛壬癸")
        return "".join(chars)
    for i in rng.sample(range(len(words)), k):
        words[i] = rng.choice(["apple", "zebra", "quantum", "river", "seven", "blue"])
    return " ".join(words)


def test_default_thresholds_keep_clean_sentences_of_every_language(tmp_path, client):
    """The shipped sentences, regrouped at random into 5-sentence documents (the shipped files group them in
    alphabetical order, which puts templated sentences side by side: those documents ARE repetitive), pass the
    default filters and deduplication: >= 95% kept per language, scripts without spaces included."""
    for lang in LANGS:
        sentences = [s for row in _rows(CORPUS_DIR / f"{lang}.jsonl") for s in SENTENCE_END.split(row["text"])]
        random.Random(lang).shuffle(sentences)
        _write(tmp_path / "in" / f"{lang}.jsonl",
               [{"text": " ".join(sentences[i:i + 5]), "lang": lang} for i in range(0, len(sentences), 5)])
    summary = run_clean(_config([tmp_path / "in"], tmp_path / "out"), client=client)
    kept = _kept(tmp_path / "out")
    for lang in LANGS:
        counts = summary.languages[lang]
        assert counts.documents_kept == len(kept[lang])
        assert counts.documents_kept >= 0.95 * counts.documents_in, (lang, counts.removed)
    assert summary.languages["zh"].documents_kept == summary.languages["zh"].documents_in


def test_duplicates_exact_and_near_go_and_the_first_in_plan_order_stays(tmp_path, client):
    """The whole shipped corpus (4,306 distinct documents, 27 languages) then, in a later file, exact copies
    (re-cased, re-spaced, under another language), copies with 3 words changed, and repeats within that file.
    Only deduplication is on (normalization off too: 163 shipped documents hold double spaces or NBSPs, and
    the outputs are compared with the inputs as written)."""
    rng = random.Random(0)
    originals = [row for lang in LANGS for row in _rows(CORPUS_DIR / f"{lang}.jsonl")]
    exact = [dict(r, text=f"  {r['text'].upper() if i % 2 else r['text']}  ".replace(" ", "  "),
                  lang="fr" if i % 3 == 0 else r["lang"]) for i, r in enumerate(originals[::10])]
    near = [dict(r, text=_change_words(r["text"], 3, rng)) for r in originals[5::10]]
    vocabulary = sorted({w for r in originals if r["lang"] == "en" for w in r["text"].split()})
    fresh = [{"text": " ".join(rng.sample(vocabulary, 40)), "lang": "en"} for _ in range(30)]  # distinct
    copies = exact + near + fresh + fresh[:10]  # the last 10 repeat earlier lines of the same file
    _write(tmp_path / "in" / "a_corpus.jsonl", originals)
    _write(tmp_path / "in" / "b_copies.jsonl", copies)
    config = _config([tmp_path / "in"], tmp_path / "out", normalize={"enabled": False}, quality={"enabled": False},
                     pii={"enabled": False}, max_rows_per_shard=1000)
    summary = run_clean(config, client=client)
    out = [text for texts in _kept(tmp_path / "out").values() for text in texts]
    kept_originals = set(out) & {r["text"] for r in originals}
    false_removals = len(originals) - len(kept_originals)
    assert false_removals <= 0.01 * len(originals), false_removals
    assert not set(out) & {r["text"] for r in exact}  # 100% of exact copies
    assert summary.removed["exact_duplicate"] >= len(exact) + 10
    near_kept = set(out) & {r["text"] for r in near}
    assert len(near_kept) <= 0.1 * len(near), len(near_kept)
    assert sum(out.count(r["text"]) for r in fresh) == len(fresh)  # each fresh one once: its first copy
    examples = {r["reason"]: r for r in _removed(tmp_path / "out")}
    first = examples["exact_duplicate"]
    assert first["where"].startswith(str(tmp_path / "in" / "b_copies.jsonl"))
    assert first["duplicate_of"].startswith(str(tmp_path / "in" / "a_corpus.jsonl"))
    # Cut into ranges of 700 keys (8 per band, not 1), the join finds the same pairs: the same output, byte for byte.
    ranged = run_clean(derive(config, out_dir=str(tmp_path / "ranged"),
                              near_dedup=derive(config.near_dedup, docs_per_task=700)), client=client)
    assert ranged.join_tasks == 8 * summary.join_tasks
    assert ranged.removed == summary.removed
    assert _kept(tmp_path / "ranged") == _kept(tmp_path / "out")


def test_emails_and_ip_addresses_are_redacted_and_counted_per_language(tmp_path, client):
    def plain(lang: str) -> list[dict]:  # documents that normalization and redaction leave as they are
        return [r for r in _rows(CORPUS_DIR / f"{lang}.jsonl")
                if normalize(r["text"], NormalizeConfig()) == r["text"] and not any(redact(r["text"], PiiConfig())[1:])]

    en, zh = plain("en")[:20], plain("zh")[:20]
    rows = [dict(r, text=f"{r['text']} Write to jane.doe{i}@example.org or ping 10.{i}.0.1 and 2001:db8::{i + 1}.")
            for i, r in enumerate(en)]
    rows += [dict(r, text=f"{r['text']}联系邮箱：wang{i}@mail.example.cn。服务器地址：192.168.{i}.7。")
             for i, r in enumerate(zh)]
    _write(tmp_path / "in.jsonl", rows)
    summary = run_clean(_config([tmp_path / "in.jsonl"], tmp_path / "out"), client=client)
    assert (summary.languages["en"].emails_redacted, summary.languages["en"].ips_redacted) == (20, 40)
    assert (summary.languages["zh"].emails_redacted, summary.languages["zh"].ips_redacted) == (20, 20)
    kept = _kept(tmp_path / "out")
    assert sorted(kept["en"]) == sorted(f"{r['text']} Write to PI:EMAIL or ping PI:IP_ADDRESS and PI:IP_ADDRESS."
                                        for r in en)
    assert sorted(kept["zh"]) == sorted(f"{r['text']}联系邮箱：PI:EMAIL。服务器地址：PI:IP_ADDRESS。" for r in zh)


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> Path:
    """~2,600 documents of 4 languages, each document 4 times, shuffled, plus near copies: a run whose shards
    depend on each other through duplicates."""
    rng = random.Random(1)
    rows = [row for lang in ("en", "fr", "zh", "ar") for row in _rows(CORPUS_DIR / f"{lang}.jsonl")]
    rows = rows * 4 + [dict(r, text=_change_words(r["text"], 2, rng)) for r in rows[::7]]
    rng.shuffle(rows)
    return _write(tmp_path_factory.mktemp("mixed") / "mixed.jsonl", rows)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, mixed) -> dict[str, bytes]:
    """The mixed file cleaned in-process (no Dask), in 300-row shards: what every other run must reproduce."""
    out = tmp_path_factory.mktemp("reference")
    run_clean(_config([mixed], out, workers=0, max_rows_per_shard=300))
    return _files(out)


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_identical_output_for_any_worker_count(tmp_path, client, mixed, reference, workers):
    config = _config([mixed], tmp_path, workers=workers, max_rows_per_shard=300)
    summary = run_clean(config, client=client if workers == 2 else None)
    assert _files(tmp_path) == reference
    assert summary.shards.total == 9 and summary.removed["near_duplicate"] > 50
    assert summary.removed["exact_duplicate"] % 3 == 0 and summary.removed["exact_duplicate"] > 1800  # 3 of 4 copies


def test_any_sharding_keeps_the_same_documents_in_the_same_order(tmp_path, mixed):
    """One shard, row ranges, and byte ranges (the default plan of a large file): the same documents."""
    one = run_clean(_config([mixed], tmp_path / "one", workers=0, max_rows_per_shard=None))
    many = run_clean(_config([mixed], tmp_path / "many", workers=0, max_rows_per_shard=97))
    ranges = run_clean(_config([mixed], tmp_path / "bytes", workers=0, shard_bytes=mixed.stat().st_size // 8))
    assert (one.shards.total, many.shards.total, ranges.shards.total) == (1, 27, 8)
    assert _kept(tmp_path / "one") == _kept(tmp_path / "many") == _kept(tmp_path / "bytes")
    assert one.languages == many.languages == ranges.languages


def test_byte_range_shards_name_file_lines(tmp_path):
    """Removed rows of every byte-range shard are named by their line in the file, as with one shard."""
    rows = [json.dumps(r, ensure_ascii=False) for r in _rows(CORPUS_DIR / "en.jsonl")] * 3
    bad = list(range(40, len(rows), 40))  # 0-based rows replaced by broken JSON, spread over every shard
    for i in bad:
        rows[i] = '{"text": broken'
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    summary = run_clean(_config([path], tmp_path / "out", workers=0, shard_bytes=path.stat().st_size // 6))
    assert summary.shards.total >= 6
    removed = _removed(tmp_path / "out")
    assert [r["where"] for r in removed if r["reason"] in REJECT_REASONS] == [f"{path}:{i + 1}" for i in bad]
    first = {}  # text -> the file line of its first copy
    for i, row in enumerate(rows):
        if i not in bad:
            first.setdefault(json.loads(row)["text"], i + 1)
    duplicates = [r for r in removed if r["reason"] == "exact_duplicate"]
    assert len(duplicates) == 20, "copies 2 and 3 of the file's rows, in later shards"
    for r in duplicates:  # both lines are file lines, the copy's and the first copy's
        line = int(r["where"].rpartition(":")[2])
        original = first[json.loads(rows[line - 1])["text"]]
        assert line > original and r["duplicate_of"] == f"{path}:{original}"


class _CountingFile(io.FileIO):
    """A file that adds the bytes it reads to ``read[path]``."""

    read: Counter[str] = Counter()

    def readinto(self, buffer) -> int:
        n = super().readinto(buffer)
        _CountingFile.read[str(self.name)] += n or 0
        return n


def test_byte_range_shards_read_each_byte_once(tmp_path, monkeypatch):
    """One file cut into 8 byte ranges: the run reads each byte once, plus at most a read buffer and a line per
    shard (each range names its rows from its own first line; the run adds the rows of the shards before)."""
    import bloomdata.readers.jsonl

    rows = [json.dumps(r, ensure_ascii=False) for lang in ("en", "hi") for r in _rows(CORPUS_DIR / f"{lang}.jsonl")]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    size, buffer = path.stat().st_size, 1 << 12
    monkeypatch.setattr(bloomdata.readers.jsonl, "open_bytes",
                        lambda p: io.BufferedReader(_CountingFile(p, "rb"), buffer))
    _CountingFile.read.clear()
    summary = run_clean(_config([path], tmp_path / "out", workers=0, shard_bytes=size // 8 + 1))
    assert summary.shards.total == 8 and summary.documents_in == len(rows)
    longest = max(len(r.encode("utf-8")) + 1 for r in rows)
    assert size <= _CountingFile.read[str(path)] <= size + 8 * (buffer + longest) < size + size


def test_clean_plans_a_large_file_by_bytes_and_workers_as_the_build_does(mixed):
    from bloomdata.build import BuildConfig
    from bloomdata.build.run import plan_build
    from bloomdata.readers import plan_job

    for workers in (1, 2, 4):
        clean = _config([mixed], "out", workers=workers, shard_bytes=mixed.stat().st_size // 3)
        build = BuildConfig(sources=clean.sources, tokenizer="t", out_dir="out", workers=workers,
                            shard_bytes=clean.shard_bytes)
        shards = plan_job(clean).shards
        assert shards == plan_build(build).shards
        assert len(shards) >= 3 and all(s.byte_range for s in shards)


@pytest.mark.integration
def test_killed_run_resumes_to_identical_output(tmp_path, client, mixed, reference):
    cmd = [sys.executable, "-m", "bloomdata.cli", "clean", "--input", str(mixed), "--out", str(tmp_path),
           "--workers", "1", "--max-rows-per-shard", "300", "--keep-work", "--no-progress"]
    finished = kill_after_markers(cmd, tmp_path / "work" / "filter")
    assert not (tmp_path / SUMMARY_FILE).exists(), "the run finished before it was killed"
    summary = run_clean(_config([mixed], tmp_path, max_rows_per_shard=300), client=client)
    assert summary.shards.reused == finished and summary.shards.built == 9 - finished
    assert _files(tmp_path) == reference
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name] and not (tmp_path / "work").exists()
    again = run_clean(_config([mixed], tmp_path, max_rows_per_shard=300), client=client)
    assert again.up_to_date and again.fingerprint == summary.fingerprint and _files(tmp_path) == reference


BAD_LINES = [
    b'{"text": "good one: a sentence long enough to pass every filter of the clean step, with words.", "lang": "en"}',
    b'{"text": "broken json", ',
    b'{"text": "bad \xff\xfe utf8"}',
    b'{"lang": "en"}',
    b'{"text": 42}',
    b'{"text": ""}',
    b'{"text": "good two: another sentence long enough to pass every filter of the clean step, too.", "lang": "en"}',
]


def test_bad_rows_are_counted_like_the_build_and_strict_refuses_them(tmp_path, client):
    import gzip

    (tmp_path / "in").mkdir()
    bad = tmp_path / "in" / "bad.jsonl"
    bad.write_bytes(b"\n".join(BAD_LINES) + b"\n")
    body = "".join(json.dumps({"text": t["text"], "lang": "en"}) + "\n" for t in _rows(CORPUS_DIR / "en.jsonl"))
    broken = tmp_path / "in" / "broken.jsonl.gz"
    whole = gzip.compress(body.encode())
    broken.write_bytes(whole[:len(whole) // 2])
    summary = run_clean(_config([tmp_path / "in"], tmp_path / "out"), client=client)
    assert summary.rejects == {"malformed_json": 1, "invalid_utf8": 1, "missing_text": 1, "non_string_text": 1,
                               "empty_text": 1, "corrupt_file": 1}
    assert set(summary.rejects) == set(REJECT_REASONS)
    rejected = [r for r in _removed(tmp_path / "out") if r["reason"] in REJECT_REASONS]
    assert [r["where"] for r in rejected[:5]] == [f"{bad}:{n}" for n in (2, 3, 4, 5, 6)]
    assert rejected[5]["reason"] == "corrupt_file" and rejected[5]["where"].startswith(f"{broken}:")
    assert summary.documents_in == 2 + int(rejected[5]["where"].rsplit(":", 1)[1]) - 1
    from bloomdata.errors import BloomstackError

    with pytest.raises(BloomstackError, match=rf"^{bad}:2: malformed_json") as err:
        run_clean(_config([tmp_path / "in"], tmp_path / "out", strict=True), client=client)
    assert "\n" not in str(err.value)
    # --strict also refuses shards filtered (and kept) by a lenient run, even one that kept no examples
    quiet = _config([bad], tmp_path / "quiet", workers=0, max_removed_examples=0, keep_work=True)
    run_clean(quiet)
    with pytest.raises(BloomstackError, match=rf"^{bad}:1: malformed_json \(or later\)"):
        run_clean(derive(quiet, strict=True))


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bloomdata.cli", "clean", *map(str, args), "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.integration
def test_cli_errors_are_one_line_and_write_nothing(tmp_path):
    good = _write(tmp_path / "in" / "en.jsonl", _rows(CORPUS_DIR / "en.jsonl")[:5])
    config = tmp_path / "clean.yaml"
    config.write_text(f"sources: ['{good}']\nout_dir: {tmp_path / 'never'}\nquality:\n  languages:\n"
                      "    zh: {min_wrds: 3}\n")
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"content": ["a", "b"]}), tmp_path / "no_text.parquet")
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    for args, needle in [
        (["--input", tmp_path / "missing.jsonl", "--out", tmp_path / "never"], "missing.jsonl"),
        (["--input", good, "--out", tmp_path / "never", "--lang-id.model", tmp_path / "lid.bin"],
         "lid.bin: fastText language-id model not found"),
        (["--input", good, "--out", tmp_path / "never", "--quality.flagged-words", f"en={tmp_path / 'nope.txt'}"],
         "nope.txt: cannot read the word list"),
        (["--input", good, "--out", tmp_path / "never", "--near-dedup.bands", "0"], "--near-dedup.bands"),
        (["--config", config], "languages.zh.min_wrds"),
        (["--input", good, "--out", blocker / "sub", "--workers", "0"], "a_file"),
        (["--input", good, "--out", tmp_path, "--workers", "0"], "holds an input"),
        (["--input", tmp_path / "no_text.parquet", "--out", tmp_path / "out", "--workers", "2"],  # in a Dask worker
         "no_text.parquet: no column 'text'"),
    ]:
        proc = _cli(*args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.splitlines() == [proc.stderr.strip()] and needle in proc.stderr, proc.stderr
        assert proc.stderr.startswith("bloomdata clean: error: ")
        assert not (tmp_path / "never").exists() and not (tmp_path / DATA_DIR).exists()
        assert not list((tmp_path / "out").rglob("*.jsonl.zst"))


def test_every_step_off_writes_every_input_format_back_unchanged(tmp_path):
    """jsonl, .jsonl.gz, parquet and txt in (the formats the build reads); with every step off, the same
    texts come out, in plan order, with their languages."""
    import gzip

    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [row for lang in ("en", "zh", "ur") for row in _rows(CORPUS_DIR / f"{lang}.jsonl")]
    _write(tmp_path / "in" / "a.jsonl", rows + rows[:50])
    (tmp_path / "in" / "b.jsonl.gz").write_bytes(gzip.compress((tmp_path / "in" / "a.jsonl").read_bytes()))
    pq.write_table(pa.table({"text": [r["text"] for r in rows], "lang": [r["lang"] for r in rows]}),
                   tmp_path / "in" / "c.parquet")
    (tmp_path / "in" / "d.txt").write_text(rows[0]["text"], encoding="utf-8")
    off = {"enabled": False}
    summary = run_clean(_config([tmp_path / "in"], tmp_path / "out", workers=0, normalize=off, quality=off,
                                pii=off, exact_dedup=off, near_dedup=off))
    assert summary.join_tasks == 0 and summary.documents_kept == summary.documents_in == 3 * len(rows) + 101
    kept = _kept(tmp_path / "out")
    for lang in ("en", "ur", "zh"):
        mine = [r["text"] for r in rows + rows[:50] if r["lang"] == lang]
        assert kept[lang] == mine + mine + mine[:len(mine) - (50 if lang == "en" else 0)]
    assert kept["und"] == [rows[0]["text"]]  # a txt file has no language field


@pytest.mark.integration
def test_yaml_config_with_per_language_overrides_and_flags_on_top(tmp_path):
    inputs = [CORPUS_DIR / "en.jsonl", CORPUS_DIR / "zh.jsonl"]
    config = tmp_path / "clean.yaml"
    config.write_text(f"sources: [{', '.join(repr(str(p)) for p in inputs)}]\nout_dir: {tmp_path / 'out'}\n"
                      "workers: 0\nquality:\n  languages:\n    zh: {min_words: 100000}\n")
    proc = _cli("--config", config, "--output-format", "parquet", "--json", "quality.languages.en.max_words=80")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["languages"]["zh"]["removed"] == {"too_few_words": 146} and summary["output_format"] == "parquet"
    long_en = sum(len(word_units(r["text"])) > 80 for r in _rows(CORPUS_DIR / "en.jsonl"))
    assert summary["languages"]["en"]["removed"]["too_many_words"] == long_en > 20
    docs = list(iter_documents([SourceConfig(paths=[summary["data_dir"]])]))
    assert len(docs) == summary["documents_kept"] == summary["languages"]["en"]["documents_kept"] > 50
    assert {d.lang for d in docs} == {"en"} and (tmp_path / "out" / "clean.md").is_file()
    assert (tmp_path / "out" / "clean.png").read_bytes()[:4] == b"\x89PNG"


def test_the_build_and_the_tokenizer_trainer_read_the_cleaned_data(tmp_path, client, small_tokenizer_dir):
    from bloomdata.build import BuildConfig, run_build
    from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer

    inputs = [CORPUS_DIR / f"{lang}.jsonl" for lang in ("en", "hi", "zh")]
    cleaned = run_clean(_config(inputs, tmp_path / "clean"), client=client)
    built = run_build(BuildConfig(sources=[SourceConfig(paths=[cleaned.data_dir])], tokenizer=str(small_tokenizer_dir),
                                  out_dir=str(tmp_path / "build"), progress=False), client=client)
    assert {name: o.documents for name, o in built.outputs.items()} == \
        {name: o.documents for name, o in cleaned.outputs.items()}
    assert built.rejects_total == 0
    report = train_tokenizer(TokenizerTrainConfig(sources=[SourceConfig(paths=[cleaned.data_dir])],
                                                  out_dir=str(tmp_path / "tok"), vocab_size=600, show_progress=False))
    assert set(report.languages) == {"en", "hi", "zh"}


DIGITS = "tests.bloomdata.clean_user_steps:Digits"  # a filter written outside the package


def test_a_filter_step_is_one_class_the_config_summary_report_and_examples_learn(tmp_path, client):
    """Issue 31, then 53: a user's filter is one class in their own module, named in quality.steps."""
    from bloomdata.cli.clean import parser

    en = ["the cat sat on the mat by the door", "order 1234567890 shipped 0987654321 today",
          "a short note about the weather in spring", "call 0123456789 or 9876543210 now please"]
    rows = [{"text": t, "lang": "en"} for t in en] + [{"text": "tel 0123456789 ou 99", "lang": "fr"}]
    path = _write(tmp_path / "in" / "rows.jsonl", rows)
    quality = {"steps": [DIGITS], "defaults": {"max_digits": 0.3}, "languages": {"fr": {"max_digits": 0.9}}}
    summary = run_clean(_config([path], tmp_path / "out", workers=0, quality=quality))
    # the summary counts its reason, in its place (after the built-in steps', before deduplication's)
    assert summary.removed["too_many_digits"] == 2 and summary.languages["en"].removed == {"too_many_digits": 2}
    reasons = list(summary.removed)
    assert reasons.index("perplexity") < reasons.index("too_many_digits") < reasons.index("exact_duplicate")
    assert summary.languages["fr"].documents_kept == 1  # its per-language threshold
    # on Dask workers too: each worker imports the step's module through bloomdata.plugins
    on_workers = run_clean(_config([path], tmp_path / "dask", quality=quality), client)
    assert on_workers.removed == summary.removed and on_workers.workers is None
    # the examples writer and the report name it
    assert [r["reason"] for r in _removed(tmp_path / "out")] == ["too_many_digits"] * 2
    assert "too_many_digits" in (tmp_path / "out" / "clean.md").read_text()
    # the config: its parameter set on the command line (a key=value override: flags are the built-in steps'),
    # its bounds and a misspelt name checked
    config, _ = parser().parse(["--input", str(path), "--out", str(tmp_path / "o2"), f"quality.steps=[{DIGITS}, words]",
                                "quality.defaults.max_digits=0.5"])
    assert config.quality.defaults.param("max_digits") == 0.5 and config.quality.steps == [DIGITS, "words"]
    base = {"sources": [str(path)], "out_dir": str(tmp_path / "o3")}
    with pytest.raises(BloomstackError, match=r"quality\.defaults\.max_digits: Input should be less than or equal "
                                              r"to 1 \(got 2\)"):
        load_config(CleanConfig, values={**base, "quality": {"steps": [DIGITS], "defaults": {"max_digits": 2}}})
    with pytest.raises(BloomstackError, match=r"quality\.defaults\.max_digit: no filter step has a parameter "
                                              r"'max_digit'; did you mean max_digits"):
        load_config(CleanConfig, values={**base, "quality": {"steps": [DIGITS], "defaults": {"max_digit": 0.1}}})


@pytest.mark.integration
def test_the_driver_holds_no_per_language_counts_per_shard(tmp_path):
    """A 10 GB clean of 1,000 files peaked at 265 MB in the driver against 162 MB at 1 GB (100 files): the driver
    kept every shard's filter and write manifests, with their per-language counts, to the end (~27 KB a shard of
    12 languages here, measured). The run now sums them as each manifest arrives: 5-6 KB a shard remain (the
    manifests without their counts, the write manifests, the keys read back). The same as the filter stage ends:
    every full filter manifest, kept to then, peaked the driver (800 files of 100 KB: 9 MB; 12-14 KB a shard
    here); they are now stripped as they arrive (3.8-4.0 KB). Measured in a fresh process (see the module)."""
    out = subprocess.run([sys.executable, "-m", "tests.bloomdata.clean_driver_memory", str(tmp_path)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    measured = json.loads(out.stdout.splitlines()[-1])
    small, large = SIZES

    def per_shard(figures: dict[str, int]) -> float:  # JSON keys: the shard counts as strings
        return (figures[str(large)] - figures[str(small)]) / (large - small)

    held = per_shard(measured["held"])
    assert held < 18_000, f"the driver holds {held:,.0f} bytes a shard at the end of a clean run"
    # the filter stage's manifests are stripped as they arrive, not once the stage has them all
    filtered = per_shard(measured["at_filter_end"])
    assert filtered < 8_000, f"the driver holds {filtered:,.0f} bytes a shard as the filter stage ends"
