"""Word-count files (``.wc``): a pre-tokenized word -> count table, hash-partitioned, its reader and its writer.

The counting pass of tokenizer training (``bloomdata.tokenizer.counting``) spills each worker's counts into
these files, and the merge stage sums one partition of every spill into one file; the merge learner then
reads every partition. A word is the UTF-8 bytes of one piece of BLOOM's split (``Split`` before
``ByteLevel``: the byte-level string HF's trainer counts maps those bytes one to one), so a file holds no
Python objects and reads back as three arrays.

Byte layout (little-endian; ``n`` words, ``P`` partitions, ``B`` bytes of words)::

    offset  size         field
    0       8            magic b"BLWCNT01"
    8       8            uint64 P
    16      8 (P + 1)    uint64 word index where partition p starts (the last entry is n)
    ..      8 (P + 1)    uint64 byte offset in the blob where partition p starts (the last entry is B)
    ..      8 n          uint64 counts
    ..      4 n          uint32 word lengths in bytes
    ..      B            the words' bytes, concatenated in word order

A word's partition is ``xxh64(word) % P`` (seed 0): every file of a run partitions alike, so one partition
of every spill holds every count of its words. Within a partition the words keep the order they were
counted in, so a file's bytes are a deterministic function of what was counted.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO

import numpy as np
import xxhash

from bloomdata import durable
from bloomdata.errors import BloomstackError

MAGIC = b"BLWCNT01"


def partition_of(word: bytes, partitions: int) -> int:
    return xxhash.xxh64_intdigest(word) % partitions


@dataclass(frozen=True)
class Partition:
    """One partition's words: ``counts[i]`` of ``blob[starts[i]:starts[i] + lengths[i]]``."""

    counts: np.ndarray  # uint64[n]
    lengths: np.ndarray  # uint32[n]
    blob: memoryview | bytes

    def __len__(self) -> int:
        return len(self.counts)

    def words(self) -> Iterator[bytes]:
        at, blob = 0, self.blob
        for n in self.lengths.tolist():
            yield bytes(blob[at:at + n])
            at += n


class WordCountsFile:
    """A ``.wc`` file, memory-mapped: ``partition(p)`` reads only that partition's bytes."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = str(path)
        try:
            self.data = np.memmap(self.path, dtype=np.uint8, mode="r") if os.path.getsize(self.path) else None
        except OSError as exc:
            raise BloomstackError(f"cannot read word counts {self.path}: {exc.strerror or exc}") from None
        data = self.data
        if data is None or len(data) < 16 or bytes(data[:8]) != MAGIC:
            raise BloomstackError(f"{self.path}: not a word-counts file (no {MAGIC!r} header); delete it and rerun")
        self.partitions = int(data[8:16].view(np.uint64)[0])
        p1 = self.partitions + 1
        self.word_at = data[16:16 + 8 * p1].view(np.uint64)
        self.byte_at = data[16 + 8 * p1:16 + 16 * p1].view(np.uint64)
        self.n, self.blob_bytes = int(self.word_at[-1]), int(self.byte_at[-1])
        counts_at = 16 + 16 * p1
        self.counts = data[counts_at:counts_at + 8 * self.n].view(np.uint64)
        self.lengths = data[counts_at + 8 * self.n:counts_at + 12 * self.n].view(np.uint32)
        self.blob_at = counts_at + 12 * self.n
        if len(data) != self.blob_at + self.blob_bytes:
            raise BloomstackError(f"{self.path}: {len(data)} bytes, its header says {self.blob_at + self.blob_bytes} "
                                  "(a truncated or damaged word-counts file); delete it and rerun")

    def partition(self, p: int) -> Partition:
        lo, hi = int(self.word_at[p]), int(self.word_at[p + 1])
        b_lo, b_hi = int(self.byte_at[p]), int(self.byte_at[p + 1])
        assert self.data is not None  # a header was read
        blob = memoryview(self.data[self.blob_at + b_lo:self.blob_at + b_hi])  # type: ignore[arg-type]
        return Partition(self.counts[lo:hi], self.lengths[lo:hi], blob)

    def everything(self) -> Partition:
        """All partitions as one (partitions are consecutive in the file)."""
        assert self.data is not None
        blob = memoryview(self.data[self.blob_at:self.blob_at + self.blob_bytes])  # type: ignore[arg-type]
        return Partition(self.counts, self.lengths, blob)


def _write(out: IO[bytes], words: list[bytes], counts: np.ndarray, word_at: np.ndarray) -> None:
    lengths = np.fromiter(map(len, words), dtype="<u4", count=len(words))
    starts = np.zeros(len(words) + 1, dtype="<u8")
    np.cumsum(lengths, out=starts[1:])
    byte_at = starts[word_at]
    out.write(MAGIC)
    out.write(np.array([len(word_at) - 1], dtype="<u8").tobytes())
    out.write(word_at.astype("<u8").tobytes())
    out.write(byte_at.astype("<u8").tobytes())
    out.write(counts.astype("<u8").tobytes())
    out.write(lengths.tobytes())
    out.write(b"".join(words))


def write_word_counts(path: str | os.PathLike[str], counts: dict[bytes, int], partitions: int = 1) -> int:
    """Write ``counts`` (word -> count) as a ``.wc`` file of ``partitions`` hash partitions, atomically and
    synced (a completion marker vouches for it); returns the number of words. Within a partition the words
    keep the dict's order (a deterministic function of what was counted)."""
    return write_word_list(path, list(counts), np.fromiter(counts.values(), dtype=np.uint64, count=len(counts)),
                           partitions)


def write_word_list(path: str | os.PathLike[str], words: list[bytes], counts: np.ndarray, partitions: int = 1) -> int:
    """``write_word_counts`` of ``words[i]`` seen ``counts[i]`` times (distinct words), for a caller that empties
    its dict before writing: no second dict of the words is built."""
    if partitions > 1:
        part = np.fromiter(map(xxhash.xxh64_intdigest, words), dtype=np.uint64, count=len(words)) % np.uint64(partitions)
        order = np.argsort(part, kind="stable")
        words, counts = np.asarray(words, dtype=object)[order].tolist(), counts[order]  # 8 bytes a word, no ints
        word_at = np.searchsorted(part[order], np.arange(partitions + 1, dtype=np.uint64))
    else:
        word_at = np.array([0, len(words)])
    durable.write_with(path, lambda out: _write(out, words, counts, word_at))
    return len(words)


def sum_partition(paths: Iterable[str | os.PathLike[str]], p: int) -> dict[bytes, int]:
    """Partition ``p`` of every file, counts of equal words summed."""
    total: dict[bytes, int] = {}
    get = total.get
    for path in paths:
        part = WordCountsFile(path).partition(p)
        for word, count in zip(part.words(), part.counts.tolist()):
            total[word] = get(word, 0) + count
    return total
