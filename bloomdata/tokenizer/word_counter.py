"""The counting pass's word -> count table: compact arrays in C++ (csrc/bpe/word_counter.h), a dict as reference.

A counting worker (``bloomdata.tokenizer.counting``) feeds it texts, split as BLOOM splits (in C++ by
csrc/bpe/split.h, or by ``bloomdata.tokenizer.split.split_pieces``), and spills it to a
word-count file when it holds ``spill_words`` words; a merge task feeds it one partition of every spill. Both
counters give the same ``PartitionedWords`` for the same input (the words in the order first seen, grouped by
partition), so the files, and the tokenizer learned from them, do not depend on which one counted
(tests/bloomdata/test_tokenizer_counts.py).

Memory per distinct word (``bytes_per_word``), what the spill size is computed from: the C++ counter holds 20
bytes of arrays, 8-16 of index and the word's bytes, and ``take`` copies the arrays once more (~80 bytes a
word at its peak for words of ~10 bytes); a CPython dict of str -> int takes 120-200 bytes (measured 150 for short
Latin words), and its spill builds one bytes object per word beside it.
"""

from __future__ import annotations

import functools
import warnings
from collections import Counter
from typing import Any, Protocol

import numpy as np

from bloomdata.tokenizer.split import excluded_code_points, split_pieces
from bloomdata.tokenizer.word_counts import Partition, PartitionedWords, partition_words


class WordCounter(Protocol):
    """What the counting steps need of a counter."""

    bytes_per_word: int  # memory per distinct word at the spill's peak (module docstring)

    def count_text(self, text: str) -> int:
        """One occurrence of each piece of BLOOM's split of ``text``; returns the number of pieces."""

    def add(self, part: Partition) -> None:
        """The words of a word-count file's partition, with their counts."""

    def __len__(self) -> int:
        """Distinct words held."""

    def take(self, partitions: int) -> PartitionedWords:
        """The words grouped by ``xxh64(word) % partitions``, each group in the order first seen; the counter
        is emptied (its memory given back) before the words are written anywhere."""


class CompactCounter:
    """The C++ counter of ``bloomdata._bpe_learner`` (csrc/bpe/word_counter.h)."""

    bytes_per_word = 80

    def __init__(self, module: Any) -> None:
        self.counter = module.WordCounter(list(excluded_code_points()))

    def count_text(self, text: str) -> int:
        return int(self.counter.count_text(text))

    def add(self, part: Partition) -> None:
        self.counter.add(part.blob, part.lengths, part.counts)

    def __len__(self) -> int:
        return len(self.counter)

    def take(self, partitions: int) -> PartitionedWords:
        word_at, counts, lengths, blob = self.counter.take(partitions)
        self.counter.clear()
        return PartitionedWords(word_at, counts, lengths, blob)


class DictCounter:
    """The reference: a ``Counter`` of the pieces (str) or of a partition's words (bytes), in insertion order;
    ``update`` counts pieces split elsewhere (the tests give it HF's)."""

    bytes_per_word = 200

    def __init__(self) -> None:
        self.counts: Counter[Any] = Counter()

    def count_text(self, text: str) -> int:
        pieces = split_pieces(text)
        self.update(pieces)
        return len(pieces)

    def update(self, pieces: list[str]) -> None:
        """One occurrence of each piece (its UTF-8 bytes are the word)."""
        self.counts.update(pieces)  # Counter.update of a list runs in C

    def add(self, part: Partition) -> None:
        counts, get = self.counts, self.counts.get
        for word, count in zip(part.words(), part.counts.tolist()):
            counts[word] = get(word, 0) + count

    def __len__(self) -> int:
        return len(self.counts)

    def take(self, partitions: int) -> PartitionedWords:
        words = [w.encode("utf-8") if isinstance(w, str) else w for w in self.counts]
        counts = np.fromiter(self.counts.values(), dtype=np.uint64, count=len(words))
        self.counts.clear()  # before partitioning: the words are held once, as bytes, not in a second dict
        return partition_words(words, counts, partitions)


@functools.cache
def _module() -> Any:
    try:
        from bloomdata import _bpe_learner
    except ImportError:
        warnings.warn("bloomdata._bpe_learner is not built: counting words in a Python dict (2-3x the memory); "
                      "reinstall with a C++ compiler (make install)", stacklevel=3)
        return None
    return _bpe_learner


def new_counter(compact: bool = True) -> WordCounter:
    """The C++ counter when it is built (and ``compact``), else the dict."""
    module = _module() if compact else None
    return CompactCounter(module) if module is not None else DictCounter()


def bytes_per_word() -> int:
    """``bytes_per_word`` of the counter ``new_counter()`` gives, without making one."""
    return CompactCounter.bytes_per_word if _module() is not None else DictCounter.bytes_per_word
