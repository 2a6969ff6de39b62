"""SimHash near-duplicate keys as ROOTS ran them on OSCAR (bigscience-workshop/data-preparation,
preprocessing/training/01b_oscar_cleaning_and_filtering/deduplicate/: self_deduplicate.py, util.py and
conf/self_deduplicate_<lang>.yaml).

A document's fingerprint is Charikar's SimHash over its tokens: the text lower-cased and stripped of Unicode
punctuation (categories P*), cut into windows of ``window`` characters (or, for the languages in
``space_languages``, of ``window`` space-separated tokens: ROOTS's en configuration), each window hashed to
64 bits; bit i of the fingerprint is set when more windows have bit i set than not. As in ROOTS, windows
start at 0 .. len - window - 1 (the last window is left out), and a text of at most ``window`` tokens has the
fingerprint 0. Two documents are near duplicates when their fingerprints differ in at most
``hamming_distance`` bits (ROOTS: 4 of 64, with 6 blocks).

Finding the pairs (Manku et al. 2007, as simhash-py's ``find_all``): cut the 64 bits into ``blocks`` blocks;
fingerprints within distance k agree on at least blocks - k whole blocks, so every combination of blocks - k
blocks is a *band* whose key is those blocks' bits, and candidate pairs share a band key. ``band_keys`` gives
them (15 bands for 6 blocks and k = 4); the join (``bloomdata.clean.dedup``) keeps the candidates within k
bits. Joins compare fingerprints, never documents, so the result does not depend on how shards are placed.

The window hash is ours, not simhash-py's (the first 8 bytes of each window's md5, one Python call per
window: ~1 ms per KB of text): a polynomial hash of the window's code points (of its tokens' xxh3 hashes for
space windows) through splitmix64's finalizer, on numpy, ~40x faster. The algorithm, the tokens and the
thresholds are ROOTS's; the bits of a fingerprint are not simhash-py's.
"""

from __future__ import annotations

import functools
import itertools
import sys
import unicodedata

import numpy as np
import xxhash

from bloomdata.clean.measures import ngram_hashes
from bloomdata.clean.minhash import _mix
from bloomdata.clean.sections import SimHashConfig
from bloomdata.clean.text import code_points


@functools.cache
def punctuation_table() -> np.ndarray:
    """bool[0x110000]: Unicode punctuation (categories Pc, Pd, Ps, Pe, Pi, Pf, Po: regex's ``\\p{P}``)."""
    table = np.zeros(sys.maxunicode + 1, dtype=bool)
    for cp in range(0x30000):
        table[cp] = unicodedata.category(chr(cp))[0] == "P"
    return table


def _window_hashes(values: np.ndarray, window: int) -> np.ndarray:
    """uint64 hashes of the windows starting at 0 .. len - window - 1 of ``values`` (uint64)."""
    m = len(values) - window
    if m <= 0:
        return np.zeros(0, np.uint64)
    return _mix(ngram_hashes(values, window)[:m].copy())


def fingerprint_of(hashes: np.ndarray) -> int:
    """Charikar's SimHash of 64-bit token hashes: bit i set when more than half of them have it (0 when none)."""
    if len(hashes) == 0:
        return 0
    bits = np.unpackbits(hashes.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")  # (m, 64), bit i at i
    ones = bits.sum(axis=0, dtype=np.int64)
    return int(np.packbits(ones * 2 > len(hashes), bitorder="little").view("<u8")[0])


class SimHasher:
    """Fingerprints and band keys for one ``SimHashConfig``."""

    def __init__(self, config: SimHashConfig):
        self.config = config
        self.window = config.window
        size, extra = divmod(64, config.blocks)
        widths = [size + (i < extra) for i in range(config.blocks)]
        starts = np.cumsum([0, *widths[:-1]])
        self.masks = [((1 << w) - 1) << int(s) for w, s in zip(widths, starts)]  # one bit mask per block
        self.bands = list(itertools.combinations(range(config.blocks), config.blocks - config.hamming_distance))
        self.band_masks = np.array([sum(self.masks[b] for b in band) for band in self.bands], dtype=np.uint64)

    def fingerprint(self, text: str, lang: str | None) -> int:
        cp = code_points(text.lower())
        cp = cp[~punctuation_table()[cp]]
        if (lang or "").split("-")[0].split("_")[0] in self.config.space_languages:
            tokens = cp.tobytes().decode("utf-32-le").split(" ")
            values = np.array([xxhash.xxh3_64_intdigest(t.encode("utf-8")) for t in tokens], dtype=np.uint64)
        else:
            values = cp.astype(np.uint64)
        return fingerprint_of(_window_hashes(values, self.window))

    def band_keys(self, fingerprints: np.ndarray) -> np.ndarray:
        """uint64[n, bands]: per band, the fingerprint's bits in that band's blocks, mixed with the band
        number (so that equal bits in two bands are different keys)."""
        fp = fingerprints.astype(np.uint64)[:, None] & self.band_masks[None, :]
        return _mix(fp ^ (np.arange(len(self.bands), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))[None, :])
