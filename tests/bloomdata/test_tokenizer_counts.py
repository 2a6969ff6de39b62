"""The counts trainer learns exactly what Hugging Face's BpeTrainer learns in memory: the same tokenizer.json,
byte for byte, on every script of the repository's corpora; its pass over the inputs is parallel, spills to
disk and resumes; the C++ learner and its Python reference agree merge for merge."""

from __future__ import annotations

import json
import random
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Regex, pre_tokenizers

from bloomdata import _bpe_learner, cli
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer import counting
from bloomdata.tokenizer.bpe import (
    BLOOM_SPLIT_PATTERN,
    SPECIAL_TOKENS,
    TokenizerTrainConfig,
    check_budget,
    choose_trainer,
    tokenizer_from_merges,
    train_from_texts,
    train_tokenizer,
)
from bloomdata.tokenizer.counting import WORK_NAME, count_words, spill_words
from bloomdata.tokenizer.merges import (
    LearnedMerges,
    WordArrays,
    byte_ids,
    byte_level_chars,
    initial_vocab,
    learn_from_counts,
    learn_merges,
    learn_merges_reference,
    load_words,
)
from bloomdata.tokenizer.split import excluded_code_points, split_pieces
from bloomdata.tokenizer.word_counter import CompactCounter, DictCounter, new_counter
from bloomdata.tokenizer.word_counts import WordCountsFile, partition_of, write_partitioned, write_word_counts
from tests.bloomdata.conftest import SMALL_BUDGET, SMALL_VOCAB
from tests.harness.kill_midway import kill_after_markers

LANGS = sorted(p.stem for p in (Path(__file__).parents[1] / "data" / "corpus").glob("*.jsonl"))


def _config(sources: list[SourceConfig], out: Path, **kw) -> TokenizerTrainConfig:
    return TokenizerTrainConfig(sources=sources, out_dir=str(out), show_progress=False, **kw)


def _trained(config: TokenizerTrainConfig, trainer: str, out: Path) -> bytes:
    report = train_tokenizer(derive(config, trainer=trainer, out_dir=str(out)))
    assert report.trainer == trainer
    return (out / "tokenizer.json").read_bytes()


def _counts_of(texts: list[str]) -> Counter[str]:
    split = pre_tokenizers.Split(Regex(BLOOM_SPLIT_PATTERN), behavior="isolated", invert=False)
    return Counter(p for t in texts for p, _ in split.pre_tokenize_str(t))


def _word_arrays(counts: Counter[str], vocab: list[str]) -> WordArrays:
    """The learner's arrays of word counts over ``vocab``'s byte characters, as the .wc files give them."""
    words = [w.encode("utf-8") for w in counts]
    symbols = byte_ids(vocab)[np.frombuffer(b"".join(words), dtype=np.uint8)] if words else np.zeros(0, np.uint32)
    offsets = np.concatenate([[0], np.cumsum([len(w) for w in words])]).astype(np.int64)
    return WordArrays(np.ascontiguousarray(symbols, dtype=np.uint32), offsets,
                      np.array(list(counts.values()), dtype=np.uint64))


def _learn_both(counts: Counter[str], vocab: list[str], vocab_size: int, min_frequency: int,
                reference: bool = False) -> LearnedMerges:
    """The merges of the C++ learner, or (``reference``) of the Python one."""
    words = _word_arrays(counts, vocab)
    if not reference:
        return learn_merges(words, vocab, vocab_size, min_frequency)
    bounds, flat = words.offsets.tolist(), words.symbols.tolist()
    return learn_merges_reference([flat[a:b] for a, b in zip(bounds, bounds[1:])], words.counts.tolist(), vocab,
                                  vocab_size, min_frequency)


def _learn(counts: Counter[str], vocab_size: int, min_frequency: int, reference: bool = False) -> bytes:
    """tokenizer.json learned from word counts (through the .wc arrays), as the counts trainer does."""
    learned = _learn_both(counts, initial_vocab(SPECIAL_TOKENS, byte_level_chars()), vocab_size, min_frequency,
                          reference)
    return tokenizer_from_merges(learned.vocab, learned.merges).to_str(pretty=True).encode("utf-8")


def test_the_default_tokenizer_is_byte_identical(tmp_path, corpus_dir, small_tokenizer_dir):
    """The session's tokenizer (27 languages, vocab 3000, 1 MB, trained in memory) from the counts trainer."""
    config = _config([SourceConfig(paths=[str(corpus_dir)])], tmp_path, vocab_size=SMALL_VOCAB,
                     byte_budget=SMALL_BUDGET, seed=0, workers=0)
    assert _trained(config, "counts", tmp_path / "counts") == (small_tokenizer_dir / "tokenizer.json").read_bytes()
    report = json.loads((tmp_path / "counts" / "training_report.json").read_text())
    memory = json.loads((small_tokenizer_dir / "training_report.json").read_text())
    for field in ("languages", "bytes_available", "probabilities", "bytes_quota", "bytes_drawn", "docs_drawn",
                  "total_bytes_drawn", "vocab_size"):
        assert report[field] == memory[field], field
    assert report["trainer"] == "counts" and report["distinct_words"] > 10_000
    assert not (tmp_path / "counts" / WORK_NAME).exists(), "the work files go once the tokenizer is saved"


@pytest.mark.parametrize("lang", LANGS)
def test_every_script_byte_identical(tmp_path, corpus_dir, lang):
    """Each language alone, every merge it has (min_frequency 2 ends the loop before vocab_size), and a
    budget that cuts the corpus: vocabularies, merges, ties and the stop all as HF's trainer has them."""
    config = _config([SourceConfig(paths=[str(corpus_dir / f"{lang}.jsonl")])], tmp_path, vocab_size=60_000,
                     byte_budget=80_000, seed=3, workers=0)
    memory = _trained(config, "memory", tmp_path / "memory")
    assert json.loads(memory)["model"]["merges"], "the language has merges"
    assert _trained(config, "counts", tmp_path / "counts") == memory


@pytest.mark.parametrize("min_frequency", [0, 1, 5])
def test_min_frequency_and_vocab_limits(tmp_path, corpus_dir, min_frequency):
    config = _config([SourceConfig(paths=[str(corpus_dir / "zh.jsonl"), str(corpus_dir / "ar.jsonl")])], tmp_path,
                     vocab_size=2_000 if min_frequency == 1 else 100_000, byte_budget=120_000,
                     min_frequency=min_frequency, workers=0)
    assert _trained(config, "counts", tmp_path / "counts") == _trained(config, "memory", tmp_path / "memory")


def test_duplicates_and_a_text_cut_to_its_quota(tmp_path, corpus_dir):
    """Exact duplicate documents (drawn once) across files, and a language whose documents are all larger than
    its quota (its first document in key order is cut at a character boundary): the same sample both ways."""
    rows = [json.loads(line) for line in (corpus_dir / "hi.jsonl").read_text(encoding="utf-8").splitlines()]
    long = [{"text": " ".join(r["text"] for r in rows[i:i + 40]), "lang": "long"} for i in range(0, 120, 40)]
    (tmp_path / "in").mkdir()
    for name, part in (("a", rows[:100] + long), ("b", rows[50:] + long[:1])):
        (tmp_path / "in" / f"{name}.jsonl").write_text(
            "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8")
    config = _config([SourceConfig(paths=[str(tmp_path / "in")])], tmp_path, vocab_size=5_000, byte_budget=30_000,
                     alpha=0.0, shard_bytes=20_000, workers=0)
    memory = _trained(config, "memory", tmp_path / "memory")
    assert _trained(config, "counts", tmp_path / "counts") == memory
    reports = [json.loads((tmp_path / d / "training_report.json").read_text()) for d in ("memory", "counts")]
    assert reports[0]["docs_drawn"]["long"] == 1 and reports[0]["bytes_drawn"]["long"] <= 15_000
    assert [r["bytes_drawn"] for r in reports] == [reports[0]["bytes_drawn"]] * 2


def test_a_rerun_with_another_seed_draws_its_own_sample(tmp_path, corpus_dir):
    """The kept work files of one seed are never reused for another (the scan's keys depend on the seed)."""
    config = _config([SourceConfig(paths=[str(corpus_dir / f"{lang}.jsonl") for lang in ("fr", "ur")])], tmp_path,
                     vocab_size=800, byte_budget=60_000, keep_work=True, workers=0)
    for seed in (1, 2):
        again = derive(config, seed=seed)
        assert _trained(again, "counts", tmp_path / "counts") == _trained(again, "memory", tmp_path / f"m{seed}")
    assert _trained(derive(config, seed=1), "memory", tmp_path / "m") != \
        (tmp_path / "counts" / "tokenizer.json").read_bytes(), "the seeds draw different samples"


def _random_texts(rng: random.Random, alphabet: str, docs: int) -> list[str]:
    """Words of a tiny alphabet with long repeats (aaaa, abab...): many equal counts (ties) and tokens formed
    two ways (ab+c and a+bc), the learner's hard cases."""
    out = []
    for _ in range(docs):
        words = []
        for _ in range(rng.randint(1, 30)):
            unit = "".join(rng.choices(alphabet, k=rng.randint(1, 3)))
            words.append(unit * rng.randint(1, 4) + "".join(rng.choices(alphabet, k=rng.randint(0, 3))))
        out.append(rng.choice([" ", "\n", ", "]).join(words))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_random_counts_match_hf_and_the_reference(seed):
    rng = random.Random(seed)
    texts = _random_texts(rng, rng.choice(["ab", "abc", "aé", "ab c"]), rng.randint(5, 120))
    vocab_size, min_frequency = rng.choice([270, 300, 400, 5000]), rng.choice([0, 1, 2, 3])
    hf = train_from_texts(texts, vocab_size, min_frequency).to_str(pretty=True).encode("utf-8")
    counts = _counts_of(texts)
    assert _learn(counts, vocab_size, min_frequency) == hf
    assert _learn(counts, vocab_size, min_frequency, reference=True) == hf


def test_cpp_learner_equals_the_reference_on_a_large_vocabulary(corpus_dir):
    texts = [json.loads(line)["text"] for lang in ("en", "hi", "zh") for line in
             (corpus_dir / f"{lang}.jsonl").read_text(encoding="utf-8").splitlines()]
    counts = _counts_of(texts)
    assert _learn(counts, 6_000, 2) == _learn(counts, 6_000, 2, reference=True)


def test_cpp_learner_equals_the_reference_past_a_dense_pair_index(corpus_dir):
    """An initial vocabulary over 4,096 tokens (5,000 unused ones before the bytes) takes the learner's hash-map
    index of the initial pairs instead of its dense table; merges and tokens stay the reference's."""
    texts = [json.loads(line)["text"] for line in (corpus_dir / "en.jsonl").read_text(encoding="utf-8").splitlines()]
    counts = _counts_of(texts[:400])
    vocab = initial_vocab([*SPECIAL_TOKENS, *(f"<extra_{i}>" for i in range(5_000))], byte_level_chars())
    reference = _learn_both(counts, vocab, len(vocab) + 1_500, 2, reference=True)
    learned = _learn_both(counts, vocab, len(vocab) + 1_500, 2)
    assert len(reference.merges) > 1_000
    assert (learned.vocab, learned.merges) == (reference.vocab, reference.merges)


def test_python_and_cpp_splits_equal_hf_split(corpus_dir):
    """The counting workers' splits give HF's pieces: every BMP code point between pieces, inside them and
    doubled, astral characters, runs of spaces, and every document of the corpus. ``re``'s pieces are compared
    one by one; the C++ split's through a counter: the same number of pieces, the same words, counts and
    first-seen order as the dict of HF's pieces."""
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF] + ["😀", "\U0001f1eb\U0001f1f7"]
    texts = ["".join(f"x{c} {c}{c}y  {c} " for c in chars), "  a  b\n\n c\t\x1c \x1c !? . , (x) | …。，、।۔،",
             " ", "", "a", " a", "a ", "  ", "a  ", " \u3000b", "\u3000 b", "é b", " 😀 ", "x\n y"]
    texts += ["".join(f"{c} {c}" for c in "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
                      "!(),.?|\u2026\u3001\u3002\uff0c\u0964\u06d4\u060c")]
    texts += _corpus_texts(corpus_dir)
    split = pre_tokenizers.Split(Regex(BLOOM_SPLIT_PATTERN), behavior="isolated", invert=False)
    assert len(excluded_code_points()) == 39
    compact, reference = new_counter(), DictCounter()
    for i, text in enumerate(texts):
        pieces = [p for p, _ in split.pre_tokenize_str(text)]
        assert split_pieces(text) == pieces, text[:80]
        assert compact.count_text(text) == len(pieces), text[:80]
        reference.update(pieces)
        if i < 30 or i == len(texts) - 1:  # each of the constructed texts on its own, then the corpus at once
            _same_words(compact.take(1), reference.take(1))


def test_word_counts_file_round_trip_and_damage(tmp_path):
    words = {f"w{i}".encode() * (i % 5 + 1): i + 1 for i in range(1000)} | {"é日".encode(): 7, b"": 1}
    path = tmp_path / "a.wc"
    assert write_word_counts(path, words, 8) == len(words)
    f = WordCountsFile(path)
    assert f.partitions == 8 and f.n == len(words)
    seen = {}
    for p in range(8):
        part = f.partition(p)
        got = list(part.words())
        assert got == [w for w in words if partition_of(w, 8) == p], "in the dict's order"
        seen.update(zip(got, part.counts.tolist()))
    assert seen == words
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(BloomstackError, match="truncated or damaged word-counts file"):
        WordCountsFile(path)
    (tmp_path / "b.wc").write_bytes(b"not it")
    with pytest.raises(BloomstackError, match="not a word-counts file"):
        WordCountsFile(tmp_path / "b.wc")


def test_cpp_xxh64_is_the_partition_hash():
    """The C++ counter partitions words by its own XXH64: the xxhash package's, on every length from 0 to 100
    bytes (every stripe and tail path) and on the corpus' pieces."""
    rng = random.Random(0)
    words = [bytes(rng.randrange(256) for _ in range(n)) for n in range(101) for _ in range(5)]
    words += ["é日😀".encode(), b"\x00" * 64]
    for w in words:
        assert _bpe_learner.xxh64(w) == partition_of(w, 2**64), w


def _corpus_texts(corpus_dir: Path) -> list[str]:
    return [json.loads(line)["text"] for p in sorted(corpus_dir.glob("*.jsonl"))
            for line in p.read_text(encoding="utf-8").splitlines()]


def _same_words(a, b) -> None:
    for field in ("word_at", "counts", "lengths"):
        assert np.asarray(getattr(a, field)).tolist() == np.asarray(getattr(b, field)).tolist(), field
    assert bytes(a.blob) == bytes(b.blob)


def test_cpp_counter_equals_the_dict(tmp_path, corpus_dir):
    """Every script's texts through both counters (each splits them its own way): the same words, counts and
    order, grouped by partition (the
    bytes of the word-count files); a merge of spills summed in either gives the same partition; the C++
    counter holds under 50 bytes a word (the dict ~150) and nothing after ``take``."""
    texts = _corpus_texts(corpus_dir)
    compact, reference = new_counter(), new_counter(compact=False)
    assert isinstance(compact, CompactCounter) and isinstance(reference, DictCounter)
    for text in texts:
        assert compact.count_text(text) == reference.count_text(text)
    assert len(compact) == len(reference) > 100_000
    held = compact.counter.memory
    assert held < 50 * len(compact), held / len(compact)
    spilled = compact.take(8)
    _same_words(spilled, reference.take(8))
    assert len(compact) == 0 and compact.counter.memory == 0
    runs = []
    for i, lo in enumerate(range(0, len(texts), len(texts) // 3)):  # three spills, words repeated across them
        counter = new_counter()
        for text in texts[lo:lo + len(texts) // 3]:
            counter.count_text(text)
        write_partitioned(tmp_path / f"run-{i}.wc", counter.take(8))
        runs.append(WordCountsFile(tmp_path / f"run-{i}.wc"))
    for p in (0, 5):
        merged = [new_counter(), new_counter(compact=False)]
        for counter in merged:
            for run in runs:
                counter.add(run.partition(p))
        a, b = (c.take(1) for c in merged)
        _same_words(a, b)
        assert int(a.counts.sum()) == sum(int(r.partition(p).counts.sum()) for r in runs)
    with pytest.raises(TypeError, match="takes str, not bytes"):
        new_counter().count_text(b"bytes")


def test_counted_files_do_not_depend_on_the_counter(tmp_path, corpus_dir, monkeypatch):
    """The count and merge stages in-process, once with the C++ counter and once with the dict, spilling at the
    same sizes: every run and every merged partition byte-identical."""
    sources = [SourceConfig(paths=[str(corpus_dir / f"{lang}.jsonl") for lang in ("ar", "en", "hi")])]
    files = {}
    for compact in (True, False):
        out = tmp_path / str(compact)
        monkeypatch.setattr(counting, "new_counter", lambda compact=compact: new_counter(compact))
        config = _config(sources, out, byte_budget=300_000, max_memory=480_000, trainer="counts",
                         shard_bytes=60_000, workers=0)
        counts = count_words(config)
        assert counts.spills > counts.shards
        files[compact] = {p.relative_to(out): p.read_bytes() for p in sorted((out / WORK_NAME).rglob("*.wc"))}
    assert files[True] == files[False] and len(files[True]) > 64


def test_load_words_maps_bytes_to_byte_level_ids(tmp_path):
    vocab = initial_vocab(SPECIAL_TOKENS, pre_tokenizers.ByteLevel.alphabet())
    assert vocab[:4] == list(SPECIAL_TOKENS) and len(vocab) == 260
    assert set(byte_level_chars()) == set(pre_tokenizers.ByteLevel.alphabet())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    text = "".join(chr(c) for c in range(1, 0x800)) + "日本😀"
    assert "".join(byte_level_chars()[b] for b in text.encode("utf-8")) == \
        "".join(p for p, _ in byte_level.pre_tokenize_str(text))
    write_word_counts(tmp_path / "x.wc", {b"ab": 3, "é".encode(): 2})
    words = load_words([str(tmp_path / "x.wc")], byte_ids(vocab))
    assert words.offsets.tolist() == [0, 2, 4] and words.counts.tolist() == [3, 2]
    assert [vocab[i] for i in words.symbols] == ["a", "b", *byte_level_chars()[0xC3:0xC4], byte_level_chars()[0xA9]]


def test_spills_dask_and_resume_give_the_same_tokenizer(tmp_path, client, corpus_dir):
    """Counting on the Dask placement with spills of 1,000 words (max_memory 480 kB over 2 workers), a rerun
    that finds the counts done, one that recounts a single lost shard, and the trainer on those counts: one
    tokenizer throughout, the in-memory trainer's."""
    sources = [SourceConfig(paths=[str(corpus_dir / f"{lang}.jsonl") for lang in ("en", "ta", "vi", "zh")])]
    config = _config(sources, tmp_path / "out", vocab_size=1500, byte_budget=400_000, max_memory=480_000,
                     trainer="counts", keep_work=True, shard_bytes=40_000, workers=2)
    assert spill_words(config.max_memory, config.workers) == 1_000
    memory = _trained(config, "memory", tmp_path / "memory")
    work = str(tmp_path / "out" / WORK_NAME)
    counts = count_words(config, client)
    assert counts.spills > counts.shards >= 8 and not counts.up_to_date
    unbounded = derive(config, max_memory=None)
    learned = learn_from_counts(work, counts, list(SPECIAL_TOKENS), unbounded)
    assert tokenizer_from_merges(learned.vocab, learned.merges).to_str(pretty=True).encode("utf-8") == memory
    assert count_words(config, client).up_to_date, "a rerun reuses the counts"
    markers = sorted((tmp_path / "out" / WORK_NAME / "count").glob("*.done.json"))
    markers[3].unlink()
    (tmp_path / "out" / WORK_NAME / "word_counts.json").unlink()
    again = count_words(config, client)
    assert again.shards_counted == 1 and again.words == counts.words and again.occurrences == counts.occurrences
    report = train_tokenizer(unbounded, client)  # max_memory is not in the counts' key: they are reused
    assert report.distinct_words == counts.words and report.sampling_seconds < again.wall_seconds
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == memory


@pytest.mark.integration
def test_a_killed_run_resumes_to_the_same_tokenizer(tmp_path, client, corpus_dir):
    """SIGKILL the CLI and its worker once some shards are counted; the rerun counts only the others (their
    markers say so) and writes the memory trainer's tokenizer."""
    inputs = [str(corpus_dir / f"{lang}.jsonl") for lang in ("bn", "es", "te", "yo")]
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "bloomdata.cli", "train-tokenizer", *[a for i in inputs for a in ("--input", i)],
           "--out", str(out), "--trainer", "counts", "--workers", "1", "--shard-bytes", "20000", "--vocab-size",
           "1200", "--byte-budget", "2MB", "--keep-work", "--quiet"]
    done = kill_after_markers(cmd, out / WORK_NAME / "count")
    assert not (out / "tokenizer.json").exists(), "the run finished before it was killed"
    config = _config([SourceConfig(paths=inputs)], out, trainer="counts", workers=1, shard_bytes=20_000,
                     vocab_size=1200, byte_budget=2_000_000, keep_work=True)
    counts = count_words(config, client)
    assert 3 <= done < counts.shards and counts.shards_counted == counts.shards - done
    train_tokenizer(config, client)
    assert (out / "tokenizer.json").read_bytes() == _trained(config, "memory", tmp_path / "memory")
    assert not [p for p in out.rglob("*") if ".tmp-" in p.name]


def test_trainer_choice_and_budget():
    base = TokenizerTrainConfig(sources=[SourceConfig(paths=["x"])], out_dir="o", byte_budget="600MB")
    assert choose_trainer(base) == "counts", "auto: over the in-memory cap without max_memory"
    check_budget(base)  # the counts trainer needs no allow_large_budget
    assert choose_trainer(derive(base, byte_budget=100_000_000)) == "memory", "today's default"
    assert choose_trainer(derive(base, byte_budget=40_000_000, max_memory=10**9)) == "counts"
    assert choose_trainer(derive(base, byte_budget=40_000_000, max_memory=2 * 10**9)) == "memory"
    with pytest.raises(BloomstackError, match="set trainer to counts or auto, or set allow_large_budget"):
        check_budget(derive(base, trainer="memory"))


def test_learner_memory_over_max_memory_is_refused(tmp_path, corpus_dir):
    config = _config([SourceConfig(paths=[str(corpus_dir / "en.jsonl")])], tmp_path, vocab_size=1000,
                     byte_budget=50_000, trainer="counts", max_memory="300KB", workers=0)
    with pytest.raises(BloomstackError, match=r"distinct words .* over max_memory 0\.0 GB; raise max_memory"):
        train_tokenizer(config)
    assert (tmp_path / WORK_NAME / "word_counts.json").is_file(), "the counts are kept for a rerun"


def test_cli_counts_flags(tmp_path, corpus_dir, capsys):
    out = tmp_path / "tok"
    rc = cli.main(["train-tokenizer", "--input", str(corpus_dir / "sw.jsonl"), "--out", str(out), "--vocab-size",
                   "500", "--byte-budget", "40KB", "--trainer", "counts", "--max-memory", "1GB", "--workers", "0",
                   "--quiet"])
    assert rc == 0 and "wrote" in capsys.readouterr().out
    assert json.loads((out / "training_report.json").read_text())["trainer"] == "counts"
