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
from collections.abc import Iterator
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


@dataclass(frozen=True)
class PartitionedWords:
    """Distinct words grouped by partition, as a ``.wc`` file lays them out: partition p is words
    ``word_at[p]:word_at[p + 1]``; word i is seen ``counts[i]`` times and is ``lengths[i]`` bytes of ``blob``,
    after the words before it."""

    word_at: np.ndarray  # uint64[P + 1]
    counts: np.ndarray  # uint64[n]
    lengths: np.ndarray  # uint32[n]
    blob: bytes | np.ndarray  # uint8[B]

    def __len__(self) -> int:
        return len(self.counts)


def partition_words(words: list[bytes], counts: np.ndarray, partitions: int = 1) -> PartitionedWords:
    """``words[i]`` seen ``counts[i]`` times (distinct words), grouped by partition, each group in list order."""
    if partitions > 1:
        hashes = np.fromiter(map(xxhash.xxh64_intdigest, words), dtype=np.uint64, count=len(words))
        part = hashes % np.uint64(partitions)
        order = np.argsort(part, kind="stable")
        words, counts = np.asarray(words, dtype=object)[order].tolist(), counts[order]  # 8 bytes a word, no ints
        word_at = np.searchsorted(part[order], np.arange(partitions + 1, dtype=np.uint64))
    else:
        word_at = np.array([0, len(words)])
    return PartitionedWords(word_at.astype(np.uint64), np.asarray(counts, dtype=np.uint64),
                            np.fromiter(map(len, words), dtype=np.uint32, count=len(words)), b"".join(words))


def _write(out: IO[bytes], words: PartitionedWords) -> None:
    starts = np.zeros(len(words) + 1, dtype="<u8")
    np.cumsum(words.lengths, out=starts[1:])
    out.write(MAGIC)
    out.write(np.array([len(words.word_at) - 1], dtype="<u8").tobytes())
    out.write(words.word_at.astype("<u8").tobytes())
    out.write(starts[words.word_at.astype(np.int64)].tobytes())
    out.write(words.counts.astype("<u8").tobytes())
    out.write(words.lengths.astype("<u4").tobytes())
    out.write(words.blob if isinstance(words.blob, bytes) else words.blob.data)


def write_partitioned(path: str | os.PathLike[str], words: PartitionedWords) -> int:
    """Write ``words`` as a ``.wc`` file, atomically and synced (a completion marker vouches for it); returns
    the number of words."""
    durable.write_with(path, lambda out: _write(out, words))
    return len(words)


def write_word_counts(path: str | os.PathLike[str], counts: dict[bytes, int], partitions: int = 1) -> int:
    """Write ``counts`` (word -> count) as a ``.wc`` file of ``partitions`` hash partitions (``write_partitioned``).
    Within a partition the words keep the dict's order (a deterministic function of what was counted)."""
    return write_partitioned(path, partition_words(
        list(counts), np.fromiter(counts.values(), dtype=np.uint64, count=len(counts)), partitions))
