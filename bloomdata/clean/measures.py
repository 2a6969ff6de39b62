"""ROOTS's quality measures (bigscience-workshop/data-preparation, preprocessing/training/
01b_oscar_cleaning_and_filtering/filtering.py), on numpy where it pays.

- character repetition: of the document's character n-grams, the share covered by its ``int(sqrt(#distinct))``
  most frequent ones that occur more than once (ROOTS's ``compute_character_repetition_ratio``). The n-grams
  are counted with numpy (a rolling 64-bit polynomial hash of the code points and a sort): ~4x faster than a
  Counter of substrings;
- word repetition: the share of word n-grams that occur more than once;
- special characters: the share of characters in a set (a bool table over code points);
- word lists: the share of words (and, with augmentation, of runs of words) in a list, at most 1.
"""

from __future__ import annotations

import collections

import numpy as np

from bloomdata.clean.text import special_table

_POLY = np.uint64(0x100000001B3)  # FNV-1 64-bit prime: odd, so every step is a bijection mod 2**64


def _power(k: int) -> np.uint64:
    return np.uint64(pow(int(_POLY), k, 1 << 64))


def ngram_hashes(values: np.ndarray, n: int) -> np.ndarray:
    """h[i] = sum_k values[i + k] * P**(n - 1 - k) mod 2**64 for i < len - n + 1: one value per n-gram, by
    doubling (H(i, a + b) = H(i, a) * P**b + H(i + a, b), exact in wrapping arithmetic): log2(n) + popcount
    passes over the array instead of n - 1."""
    length, block = 1, values  # block[i] = H(i, length)
    out_len, out = 0, None  # out[i] = H(i, out_len), built from the blocks of n's binary digits
    bits = n
    while True:
        if bits & 1:
            if out is None:
                out, out_len = block.copy(), length
            else:
                m = len(values) - (out_len + length) + 1
                out = out[:m] * _power(length) + block[out_len:out_len + m]
                out_len += length
        bits >>= 1
        if not bits:
            assert out is not None  # n >= 1 has a set bit
            return out
        m = len(values) - 2 * length + 1
        block = block[:m] * _power(length) + block[length:length + m]
        length *= 2


def char_repetition_ratio(cp: np.ndarray, n: int) -> float:
    """ROOTS's character repetition ratio of a document given as uint32 code points."""
    m = len(cp) - n + 1
    if m <= 0:
        return 0.0
    h = ngram_hashes(cp.astype(np.uint64), n)[:m]
    h.sort()  # then the run lengths of equal values: np.unique's work without its extra arrays
    counts = np.diff(np.concatenate(([-1], np.flatnonzero(h[1:] != h[:-1]), [m - 1])))
    repeated = counts[counts > 1]
    top = min(int(np.sqrt(len(counts))), len(repeated))
    if top == 0:
        return 0.0
    return float(np.partition(repeated, len(repeated) - top)[-top:].sum()) / m


def word_repetition_ratio(words: list[str], n: int) -> float:
    """Share of word n-grams that occur more than once (ROOTS's word repetition ratio)."""
    if len(words) < n:
        return 0.0
    counts = collections.Counter(zip(*(words[k:] for k in range(n))))
    if len(counts) == len(words) - n + 1:  # all distinct: the common case
        return 0.0
    repeated = sum(c for c in counts.values() if c > 1)
    return repeated / (len(words) - n + 1)


def special_ratio(cp: np.ndarray, table: np.ndarray | None = None) -> float:
    """Share of the code points ``cp`` that ``table`` (bool per code point; default: Unicode categories P,
    S, N, Z and controls) marks."""
    if table is None:
        table = special_table()
    return float(np.count_nonzero(table[cp])) / len(cp) if len(cp) else 0.0


def word_ratio(words: list[str], vocabulary: frozenset[str], augmentation: tuple[int, ...] = (),
               join: str = "") -> float:
    """Share of ``words`` in ``vocabulary``, counting also the runs of ``augmentation`` words joined by
    ``join`` that are in it (ROOTS's bigram augmentation for vi and zh), at most 1."""
    if not words:
        return 0.0
    found = sum(map(vocabulary.__contains__, words))
    for size in augmentation:
        if len(words) >= size:
            runs = map(join.join, zip(*(words[k:] for k in range(size))))
            found += sum(map(vocabulary.__contains__, runs))
    return min(found / len(words), 1.0)
