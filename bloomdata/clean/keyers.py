"""The shipped keyers (``bloomdata.clean.steps.Keyer``), one class each, with the tables they write in each
shard's work directory (``OUT/work/filter/<shard>/``), every one sorted by its key so that a join task reads
only its key range of each (``bloomdata.clean.dedup``):

- ``exact.npy``: uint64[3, n], (high, low, candidate) of the exact-duplicate keys;
- ``minhash.npy``: uint64[bands, 2, m], per band the (band key, candidate) pairs (candidates without word units
  have no signature and are left out);
- ``simhash.npy``: uint64[bands, 3, m], per SimHash band the (band key, candidate, fingerprint) triples
  (candidates too short for a window have no fingerprint and are left out);
- ``lines.npy``: uint64[2, L], (hash, candidate) of the candidates' long lines, counted for template removal
  (``bloomdata.clean.templates``) instead of joined.
"""

from __future__ import annotations

import numpy as np

from bloomdata.clean.dedup import JoinTask
from bloomdata.clean.language import Doc
from bloomdata.clean.minhash import MinHasher, document_key
from bloomdata.clean.sections import (
    ExactDedupConfig,
    NearDedupConfig,
    SimHashConfig,
    StepParams,
    TemplateDedupConfig,
)
from bloomdata.clean.simhash import SimHasher
from bloomdata.clean.steps import Keyer
from bloomdata.clean.templates import LINES_FILE, line_hashes, sorted_lines
from bloomdata.clean.text import word_units

BATCH = 1024  # documents per MinHash batch


class _Section(Keyer):
    """A built-in keyer: its Params are a section of the config with an ``enabled`` switch."""

    @classmethod
    def build(cls, params: StepParams) -> Keyer | None:
        return cls(params) if getattr(params, "enabled", True) else None


class ExactKeys(_Section):
    """Exact duplicates: xxh3-128 of the text (whitespace runs as one), or ROOTS catalogue's dedup_document key
    (``bloomdata.clean.minhash.document_key``)."""

    name = "exact_dedup"
    section = "exact_dedup"
    Params = ExactDedupConfig
    params: ExactDedupConfig
    reason = "exact_duplicate"
    clock = "exact_hash"

    def __init__(self, params: StepParams):
        super().__init__(params)
        self.exact: list[tuple[int, int]] = []

    def add(self, doc: Doc, candidate: int) -> None:
        self.exact.append(document_key(doc.text, self.params))

    def files(self) -> tuple[str, ...]:
        return ("exact.npy",)

    def arrays(self) -> dict[str, np.ndarray]:
        """uint64[3, n]: (high, low, candidate), sorted by (high, low, candidate)."""
        table = np.array(self.exact, dtype=np.uint64).reshape(-1, 2)
        candidates = np.arange(len(table), dtype=np.uint64)
        order = np.lexsort((candidates, table[:, 1], table[:, 0]))
        return {"exact.npy": np.stack([table[order, 0], table[order, 1], candidates[order]])}

    def join_tasks(self, parts: int, code: int) -> list[JoinTask]:
        return [JoinTask(-1, part, parts, "exact") for part in range(parts)]


class MinHashKeys(_Section):
    """Near duplicates by MinHash LSH over shingles of word units: documents sharing any band key."""

    name = "near_dedup"
    section = "near_dedup"
    Params = NearDedupConfig
    params: NearDedupConfig

    def __init__(self, params: StepParams):
        super().__init__(params)
        self.hasher = MinHasher(self.params)
        self.batch: list[np.ndarray] = []  # shingles waiting for their batch
        self.band_keys: list[np.ndarray] = []
        self.candidates = 0

    def add(self, doc: Doc, candidate: int) -> None:
        # the filters' words are word units of this text unless the language uses ROOTS's word rule (a modifier
        # after the filters gave the document new text, and with it new words)
        self.batch.append(self.hasher.shingles(doc.words if not doc.language.roots else word_units(doc.text)))
        self.candidates += 1
        if len(self.batch) == BATCH:
            self.finish()

    def finish(self) -> None:
        if self.batch:
            self.band_keys.append(self.hasher.band_keys(self.batch))
            self.batch.clear()

    def files(self) -> tuple[str, ...]:
        return ("minhash.npy",)

    def arrays(self) -> dict[str, np.ndarray]:
        """uint64[bands, 2, m]: per band, (key, candidate) sorted by key then candidate; documents without a
        signature (all keys 0, no word units) left out."""
        self.finish()
        bands = self.params.bands
        if self.candidates == 0:
            return {"minhash.npy": np.zeros((bands, 2, 0), dtype=np.uint64)}
        keys = np.concatenate(self.band_keys)
        have = np.flatnonzero(keys.any(axis=1)).astype(np.uint64)
        keys = keys[have]
        out = np.empty((bands, 2, len(have)), dtype=np.uint64)
        for b in range(bands):
            order = np.argsort(keys[:, b], kind="stable")  # stable: ties stay in candidate order
            out[b, 0] = keys[order, b]
            out[b, 1] = have[order]
        return {"minhash.npy": out}

    def join_tasks(self, parts: int, code: int) -> list[JoinTask]:
        return [JoinTask(band, part, parts, "minhash") for band in range(self.params.bands) for part in range(parts)]


class SimHashKeys(_Section):
    """Near duplicates by SimHash as ROOTS ran it on OSCAR: fingerprints within ``hamming_distance`` bits."""

    name = "simhash"
    section = "simhash"
    Params = SimHashConfig
    params: SimHashConfig

    def __init__(self, params: StepParams):
        super().__init__(params)
        self.hasher = SimHasher(self.params)
        self.fingerprints: list[int] = []

    def add(self, doc: Doc, candidate: int) -> None:
        self.fingerprints.append(self.hasher.fingerprint(doc.text, doc.lang))

    def files(self) -> tuple[str, ...]:
        return ("simhash.npy",)

    def arrays(self) -> dict[str, np.ndarray]:
        """uint64[bands, 3, m]: per SimHash band, (key, candidate, fingerprint) sorted by key then candidate;
        candidates without a fingerprint (0: no window) left out."""
        fp = np.array(self.fingerprints, dtype=np.uint64)
        have = np.flatnonzero(fp).astype(np.uint64)
        fp = fp[have]
        keys = self.hasher.band_keys(fp)
        out = np.empty((len(self.hasher.bands), 3, len(have)), dtype=np.uint64)
        for b in range(len(self.hasher.bands)):
            order = np.argsort(keys[:, b], kind="stable")
            out[b] = keys[order, b], have[order], fp[order]
        return {"simhash.npy": out}

    def join_tasks(self, parts: int, code: int) -> list[JoinTask]:
        return [JoinTask(band, part, parts, "simhash") for band in range(len(self.hasher.bands))
                for part in range(parts)]


class TemplateLines(_Section):
    """The catalogue's template lines: hashes of the candidates' long lines, counted over the survivors of
    deduplication (``bloomdata.clean.templates``) and dropped from every document by the write stage."""

    name = "template_dedup"
    section = "template_dedup"
    Params = TemplateDedupConfig
    params: TemplateDedupConfig
    reason = ""  # removes lines, not documents
    joins = False

    def __init__(self, params: StepParams):
        super().__init__(params)
        self.hashes: list[int] = []
        self.owners: list[int] = []

    def add(self, doc: Doc, candidate: int) -> None:
        found = line_hashes(doc.text, self.params.min_line_chars)
        self.hashes.extend(found)
        self.owners.extend([candidate] * len(found))

    def files(self) -> tuple[str, ...]:
        return (LINES_FILE,)

    def arrays(self) -> dict[str, np.ndarray]:
        return {LINES_FILE: sorted_lines(self.hashes, self.owners)}

    def join_tasks(self, parts: int, code: int) -> list[JoinTask]:
        return []
