"""The merge learner: Hugging Face's ``BpeTrainer`` merge loop over word counts, in C++ with a Python reference.

Given the distinct words of a sample (as symbol ids) and their counts, it learns the merges HF's trainer
learns from the same counts (tokenizers' ``models/bpe/trainer.rs``, ``do_train``), step for step:

1. The vocabulary starts with the special tokens (in order, each once), then the alphabet: every character
   of the words and of the initial alphabet, sorted by code point (no ``limit_alphabet``). ``initial_vocab``.
2. Every adjacent pair of every word is counted (count of the word per occurrence). Each pair is queued
   once as an *entry*: (its count, the pair, the words it was seen in).
3. Loop until the vocabulary has ``vocab_size`` tokens: pop the entry with the largest count; equal counts
   pop the smaller pair first (ids compared left, then right). An entry whose count is stale (the pair's
   count changed since it was queued) is queued again with the current count. The loop stops at the first
   fresh entry whose count is below 1 or below ``min_frequency``. The new token is the two tokens' strings
   joined; when that string is already a token (``ab`` + ``c`` after ``a`` + ``bc``) it keeps its id and
   the vocabulary does not grow, but the merge is recorded all the same.
4. The pair is merged, left to right, in the words the entry lists (only those: a pair re-formed later
   through an existing token has a second entry with the words it was formed in). Each merge lowers the
   counts of the neighbouring pairs it breaks and raises those it forms; a pair that was formed somewhere
   this step is queued as a new entry of the words it was formed in, when its total count is positive. The
   merged pair's own count is left as it is (HF never clears it).

One shortcut changes nothing: an entry whose count is below ``max(min_frequency, 1)`` is not queued (HF
queues every positive count). Such an entry could only pop once no queued count is higher (a count that
grows gets a new entry with its new total, so every pair has an entry at or above its count), and there the
first fresh entry popped ends HF's loop without a merge. Rare pairs thus cost neither a queue entry nor a
word list.

One point HF leaves to chance: two queued entries of the *same* pair with the *same* count (possible only
through step 3's re-formed tokens) pop in the order of HF's heap, which depends on the order its hash maps
hand out pairs (seeded per process). Here the entry queued first pops first. On the repository's corpora
this never decides anything (tests/bloomdata/test_tokenizer_counts.py: byte-identical tokenizers).

Counts are 64-bit here; HF sums pair counts in 32 bits, which only matters past 2^31 occurrences of one
pair (a sample HF could not hold in memory).

``learn_merges`` runs the C++ learner (``bloomdata._bpe_learner``, csrc/bpe) when it is built, else the
Python reference below (the same algorithm, ~50x slower: for tests and small vocabularies).
"""

from __future__ import annotations

import heapq
import itertools
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bloomdata.errors import BloomstackError
from bloomdata.tokenizer.counting import WordCounts
from bloomdata.tokenizer.word_counts import WordCountsFile


@dataclass
class LearnedMerges:
    """What the learner returns: the vocabulary (id -> token string) and the merges in order (HF's list:
    a pair merged twice is listed twice; the tokenizer keeps the later rank, as HF's trainer does)."""

    vocab: list[str]
    merges: list[tuple[int, int]]


def initial_vocab(special_tokens: Iterable[str], alphabet: Iterable[str]) -> list[str]:
    """Specials in order (each once), then the alphabet's characters by code point, each once."""
    vocab: list[str] = []
    for token in [*special_tokens, *sorted(set(alphabet), key=ord)]:
        if token not in vocab:
            vocab.append(token)
    return vocab


def merge_word(symbols: list[int], a: int, b: int, new: int) -> list[tuple[tuple[int, int], int]]:
    """Merge every (a, b) of one word, left to right, in place; the pair changes it made, as HF's
    ``Word::merge`` lists them: (broken pair, -1) and (formed pair, +1) for each neighbour."""
    changes = []
    i = 0
    while i < len(symbols):
        if symbols[i] == a and i + 1 < len(symbols) and symbols[i + 1] == b:
            if i > 0:
                changes += [((symbols[i - 1], a), -1), ((symbols[i - 1], new), 1)]
            symbols[i:i + 2] = [new]
            if i < len(symbols) - 1:
                changes += [((b, symbols[i + 1]), -1), ((new, symbols[i + 1]), 1)]
        i += 1
    return changes


class _Queue:
    """HF's lazy max-heap of entries: (count, pair, words), largest count first, then smallest pair, then
    the entry queued first (see the module docstring)."""

    def __init__(self) -> None:
        self.heap: list[tuple[int, tuple[int, int], int, set[int]]] = []
        self.order = itertools.count()

    def push(self, count: int, pair: tuple[int, int], words: set[int], order: int | None = None) -> None:
        heapq.heappush(self.heap, (-count, pair, next(self.order) if order is None else order, words))


def learn_merges_reference(words: list[list[int]], counts: list[int], vocab: list[str], vocab_size: int,
                           min_frequency: int) -> LearnedMerges:
    """The Python reference learner (module docstring); ``words`` are changed in place."""
    vocab = list(vocab)
    ids = {token: i for i, token in enumerate(vocab)}
    pair_counts: dict[tuple[int, int], int] = {}
    where: dict[tuple[int, int], set[int]] = {}
    for w, (symbols, count) in enumerate(zip(words, counts)):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] = pair_counts.get(pair, 0) + count
            where.setdefault(pair, set()).add(w)
    queue = _Queue()
    floor = max(min_frequency, 1)  # lower counts are never queued (module docstring)
    for pair in sorted(where):
        if pair_counts[pair] >= floor:
            queue.push(pair_counts[pair], pair, where[pair])
    merges: list[tuple[int, int]] = []
    while len(ids) < vocab_size and queue.heap:
        negative, pair, order, pos = heapq.heappop(queue.heap)
        if -negative != pair_counts[pair]:
            queue.push(pair_counts[pair], pair, pos, order)
            continue
        if -negative < 1 or min_frequency > -negative:
            break
        token = vocab[pair[0]] + vocab[pair[1]]
        new = ids.setdefault(token, len(vocab))
        if new == len(vocab):
            vocab.append(token)
        merges.append(pair)
        formed: dict[tuple[int, int], set[int]] = {}
        for w in pos:
            for changed, delta in merge_word(words[w], pair[0], pair[1], new):
                pair_counts[changed] = pair_counts.get(changed, 0) + delta * counts[w]
                if delta > 0:
                    formed.setdefault(changed, set()).add(w)
        for changed in sorted(formed):
            if pair_counts[changed] >= floor:
                queue.push(pair_counts[changed], changed, formed[changed])
    return LearnedMerges(vocab, merges)


@dataclass
class WordArrays:
    """Distinct words as the learner takes them: word i is ``symbols[offsets[i]:offsets[i + 1]]`` (uint32 ids
    into the vocabulary), seen ``counts[i]`` (uint64) times; ``offsets`` is int64[W + 1]."""

    symbols: np.ndarray
    offsets: np.ndarray
    counts: np.ndarray


def learn_merges(words: WordArrays, vocab: list[str], vocab_size: int, min_frequency: int,
                 progress: Callable[[int], None] | None = None) -> LearnedMerges:
    """The merges of ``words`` from the initial ``vocab``; ``words.symbols`` is consumed (merged in place by the
    C++ learner). ``progress`` is called with the number of merges so far, now and then."""
    try:
        from bloomdata import _bpe_learner
    except ImportError:
        warnings.warn("bloomdata._bpe_learner is not built: learning merges in Python (slow); reinstall with a "
                      "C++ compiler (make install)", stacklevel=2)
        bounds, flat = words.offsets.tolist(), words.symbols.tolist()
        return learn_merges_reference([flat[lo:hi] for lo, hi in zip(bounds, bounds[1:])], words.counts.tolist(),
                                      vocab, vocab_size, min_frequency)
    tokens = [token.encode("utf-8") for token in vocab]
    new_tokens, merges = _bpe_learner.learn(words.symbols, words.offsets, words.counts, tokens, vocab_size,
                                            min_frequency, progress)
    return LearnedMerges(vocab + [t.decode("utf-8") for t in new_tokens], [(int(a), int(b)) for a, b in merges])


# ---------------------------------------------------------------------------------------------------------
# From the counts path's word-count files to the learner's arrays


def byte_level_chars() -> list[str]:
    """The character ByteLevel writes for each byte 0..255 (GPT-2's reversible map: printable Latin-1 bytes
    stand for themselves, the other 68 take the code points from 256 on, in byte order)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def byte_ids(vocab: list[str]) -> np.ndarray:
    """uint32[256]: the vocabulary id of each byte's ByteLevel character."""
    ids = {token: i for i, token in enumerate(vocab)}
    return np.array([ids[c] for c in byte_level_chars()], dtype=np.uint32)


def load_words(paths: list[str], ids: np.ndarray) -> WordArrays:
    """Every word of the ``.wc`` files: each byte of a word becomes its ByteLevel character's id (``ids``), as
    HF's trainer sees the word."""
    files = [WordCountsFile(p) for p in paths]
    symbols = np.empty(sum(f.blob_bytes for f in files), dtype=np.uint32)
    counts = np.empty(sum(f.n for f in files), dtype=np.uint64)
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    w = b = 0
    for f in files:
        part = f.everything()
        symbols[b:b + f.blob_bytes] = ids[np.frombuffer(part.blob, dtype=np.uint8)]
        counts[w:w + f.n] = part.counts
        offsets[w + 1:w + f.n + 1] = part.lengths
        w, b = w + f.n, b + f.blob_bytes
    np.cumsum(offsets, out=offsets)
    return WordArrays(symbols, offsets, counts)


def learner_bytes(words: int, symbols: int) -> int:
    """About the learner's peak memory for ``words`` distinct words of ``symbols`` bytes in all, its input
    arrays included: 18 bytes per symbol (4 for the symbol, up to 14 for the word lists, pairs and queue
    entries csrc/bpe/learner.h keeps; more merges keep more) and 24 per word (offsets, counts, lengths).
    Measured on Zipfian words (benchmarks/bench_tokenizer.py), above the interpreter: 1,743,371 words of 22.1 MB
    took 327 MB at vocabulary 32,000 and 423 MB at 250,680 (estimated 439 MB); 1,154,768 words of 14.6 MB, 215
    and 284 MB (estimated 290 MB). At 250,680 on drawn words (benchmarks/bench_bpe_learner.py): 2M words of 23.1 MB,
    497 MB (estimated 464 MB); 10M of 119 MB, 1.9 GB (2.4); 30M of 363 MB, 5.0 GB (7.2)."""
    return 18 * symbols + 24 * words


class LearnSettings(Protocol):
    vocab_size: int
    min_frequency: int
    max_memory: int | None


def learn_from_counts(work_dir: str, counts: WordCounts, special_tokens: list[str], settings: LearnSettings,
                      progress: Callable[[int], None] | None = None) -> LearnedMerges:
    """The merges of the counts path's merged partitions (``counts.partitions`` under ``work_dir``) over the
    byte-level alphabet; refuses, before loading anything, a learner that would need more than
    ``settings.max_memory``."""
    need = learner_bytes(counts.words, counts.word_bytes)
    if settings.max_memory is not None and need > settings.max_memory:
        raise BloomstackError(
            f"learning merges from {counts.words:,} distinct words ({counts.word_bytes / 1e6:,.0f} MB) needs "
            f"~{need / 1e9:.1f} GB, over max_memory {settings.max_memory / 1e9:.1f} GB; raise max_memory or lower "
            f"byte_budget (the counts in {work_dir} are kept: a rerun only learns)", keys=["max_memory"])
    vocab = initial_vocab(special_tokens, byte_level_chars())
    words = load_words([os.path.join(work_dir, f) for f in counts.partitions], byte_ids(vocab))
    return learn_merges(words, vocab, settings.vocab_size, settings.min_frequency, progress)
