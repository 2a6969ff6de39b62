"""MinHash signatures and LSH band keys, in numpy: the per-document half of near-duplicate removal.

A document's shingles are its word-unit n-grams (``bloomdata.clean.text.word_units``: words, or characters
of unspaced scripts), each hashed to 64 bits: every unit with xxh3-64, then the n hashes of a window
combined in order (``g = g * M ^ h``, M odd, wrapping). Its signature is, for each of ``bands * rows``
hash functions ``h_i(x) = (a_i * x + b_i) mod 2**64 >> 32`` (multiply-shift: a_i odd, both drawn from
``seed``), the minimum over its shingles. Each band of ``rows`` minima is folded into one 64-bit *band key*
(splitmix64 steps); two documents are candidate duplicates when any band key is equal. With b bands of r
rows a pair of Jaccard similarity s is caught with probability ``1 - (1 - s**r)**b`` (20 x 5: 0.5 -> 0.47,
0.6 -> 0.80, 0.7 -> 0.97, 0.8 -> 1.0).

Signatures are computed for a batch of documents at once: the shingles of the batch in one array, the
(shingles x hashes) products in cache-sized chunks, ``np.minimum.reduceat`` at document boundaries.

Why our own and not datatrove's ``MinhashDedupSignature`` (or datasketch, or rensa), measured on
tests/data/corpus (3.36 MB, 4,306 documents, 5-word shingles, 112 hashes, one core): this module 7 MB/s
(units and unit hashes 15 MB/s, signatures 13 MB/s); rensa 0.5 (Rust) 7.4 MB/s on the same shingle strings;
datatrove 0.10.1 0.9 MB/s (one Python ``" ".join`` and hash call per shingle, one numpy call per document;
its default xxhash path also fails with xxhash 4, our core dependency: "Strings must be encoded"); datasketch
2.0 0.8 MB/s. datatrove's stages also write per-rank bucket files for its own executor and tokenize words with
spaCy (Chinese: jieba), neither of which fits our shard plan, so we keep its idea (spill signatures per band,
join per band) and not its code; rensa would add a compiled dependency for no speed gained.
"""

from __future__ import annotations

import hashlib
import re
import string

import numpy as np
import xxhash

from bloomdata.clean.sections import ExactDedupConfig, NearDedupConfig

_COMBINE = np.uint64(0x9E3779B97F4A7C15)  # odd (2**64 / golden ratio): mixes the previous unit hash of a window
CACHE_UNITS = 500_000  # distinct units whose hashes a MinHasher keeps (~100 bytes each)
_CHUNK = 2048  # shingles per (shingles x hashes) product: 2048 x 100 x 8 bytes = 1.6 MB, in cache


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer, in place: a bijection of uint64 that spreads every input bit."""
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
    return x


class MinHasher:
    """Shingles and band keys for one ``NearDedupConfig`` (the same on every worker: the seed fixes it)."""

    def __init__(self, config: NearDedupConfig):
        self.n, self.bands, self.rows = config.n_grams, config.bands, config.rows
        rng = np.random.default_rng(config.seed)
        k = self.bands * self.rows
        self.a = rng.integers(0, 2**64, size=k, dtype=np.uint64, endpoint=False) | np.uint64(1)
        self.b = rng.integers(0, 2**64, size=k, dtype=np.uint64, endpoint=False)
        self._cache: dict[str, int] = {}

    def _unit_hashes(self, words: list[str]) -> list[int]:
        """xxh3-64 of each unit, through a per-process cache: word frequencies are Zipfian, and a dict hit
        (~40 ns) is ~4x cheaper than encoding and hashing again. Cleared when it reaches ``CACHE_UNITS``."""
        cache = self._cache
        values = list(map(cache.get, words))
        if None in values:
            if len(cache) > CACHE_UNITS:
                cache.clear()
            for i, value in enumerate(values):
                if value is None:
                    values[i] = cache[words[i]] = xxhash.xxh3_64_intdigest(words[i].encode())
        return values  # type: ignore[return-value]  # every None was filled above

    def shingles(self, words: list[str]) -> np.ndarray:
        """uint64 hashes of the document's n-grams of word units (one shingle of all units when fewer)."""
        h = np.array(self._unit_hashes(words), dtype=np.uint64)
        if len(h) <= self.n:
            if len(h) == 0:
                return h
            out = h[:1].copy()
            for x in h[1:]:
                out *= _COMBINE
                out ^= x
            return out
        m = len(h) - self.n + 1
        out = h[:m].copy()
        for k in range(1, self.n):
            out *= _COMBINE
            out ^= h[k:k + m]
        return out

    def band_keys(self, shingles: list[np.ndarray]) -> np.ndarray:
        """uint64[len(shingles), bands]: the band keys of each document (a document without shingles gets
        zeros; callers leave it out of the join)."""
        sizes = np.array([len(s) for s in shingles], dtype=np.int64)
        keys = np.zeros((len(shingles), self.bands), dtype=np.uint64)
        have = np.flatnonzero(sizes)
        start = 0
        while start < len(have):  # documents [start, stop) of `have` in one chunk (a long one alone)
            stop, total = start + 1, sizes[have[start]]
            while stop < len(have) and total + sizes[have[stop]] <= _CHUNK:
                total += sizes[have[stop]]
                stop += 1
            docs = have[start:stop]
            x = np.concatenate([shingles[i] for i in docs])
            products = x[:, None] * self.a[None, :]  # (shingles, hashes), wrapping mod 2**64
            products += self.b
            products >>= np.uint64(32)
            bounds = np.concatenate([[0], np.cumsum(sizes[docs])[:-1]])
            signature = np.minimum.reduceat(products, bounds, axis=0)  # (docs, hashes)
            keys[docs] = self._fold(signature)
            start = stop
        return keys

    def _fold(self, signature: np.ndarray) -> np.ndarray:
        """(docs, bands * rows) minima -> (docs, bands) keys: key = mix(...mix(mix(m_0) ^ m_1)... ^ m_r-1)."""
        grouped = signature.reshape(len(signature), self.bands, self.rows)
        key = _mix(grouped[:, :, 0].copy())
        for r in range(1, self.rows):
            key ^= grouped[:, :, r]
            _mix(key)
        return key


_ROOTS_DOCUMENT_DROP = re.compile(r"[\s\d" + re.escape(string.punctuation) + "]+")


def document_key(text: str, config: ExactDedupConfig) -> tuple[int, int]:
    """The exact-duplicate key of ``exact_dedup.key``: ``exact_key``, or ROOTS catalogue's dedup_document
    key (the md5 of the text without whitespace, digits and ASCII punctuation; deduplication.py there) as
    (high, low) 64-bit halves."""
    if config.key == "text":
        return exact_key(text, config.casefold)
    value = int.from_bytes(hashlib.md5(_ROOTS_DOCUMENT_DROP.sub("", text).encode("utf-8")).digest(), "big")
    return value >> 64, value & 0xFFFF_FFFF_FFFF_FFFF


def exact_key(text: str, casefold: bool) -> tuple[int, int]:
    """(high, low) 64-bit halves of the xxh3-128 of the text with whitespace runs as one space (and
    case-folded): the exact-duplicate key. 128 bits: a chance collision among 10**10 documents ~ 10**-19."""
    key = " ".join((text.casefold() if casefold else text).split())
    value = xxhash.xxh3_128_intdigest(key.encode())
    return value >> 64, value & 0xFFFF_FFFF_FFFF_FFFF
