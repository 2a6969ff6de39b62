"""Stages 2 and 3 of a clean run: join the spilled keys per band, then decide which copies go.

Stage 2 (``join``, one task per key range of each band and of the exact keys, on Dask): every shard's
stage-1 file holds its keys sorted, so a task memory-maps each file, binary-searches its range and reads
only that slice (datatrove's MinHash stages do the same with per-bucket files: signatures are never
collected in one dict). It sorts its entries by (key, global id) and, for every run of equal keys, writes
one pair (document, first document of the run) per later document. A global id is ``shard index << 32 |
candidate number``, so "first" means first in plan order, whatever the scheduling. Memory: ~100 bytes per
entry of its range for the exact keys and a SimHash band, ~75 for a MinHash band (measured: the slices, their
concatenation, the sort's order and the sorted copies; tests/bloomdata/test_clean_dedup_roots.py holds them to
it); ``near_dedup.docs_per_task`` sets how many ranges a band is cut into, and the ranges change no output.

Stage 3 (``resolve``, in the driver): the pairs are edges of a graph whose components are the duplicate
clusters (transitively: A~B and B~C put C with A, as datatrove's clustering stage does). Components are found
with numpy "hook to the smaller root, then pointer-jump" rounds (Shiloach-Vishkin), so each root is its
component's smallest global id: the first document in plan order survives, every other is removed, as an
exact duplicate when it had an exact twin, else as a near duplicate. Memory: the pairs, i.e. proportional
to the duplicates found, not to the corpus. Each shard gets its removals in ``OUT/work/resolve/<shard>.npy``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable

import numpy as np

from bloomdata import durable
from bloomdata.clean.files import MARKER_VERSION, WORK_DIR
from bloomdata.clean.summary import JoinManifest
from bloomdata.config_loader import derive

EXACT, NEAR = 0, 1  # removal reason codes in the resolve files: exact_duplicate, near_duplicate (then the run's
# own keyers' reasons: bloomdata.clean.config.dedup_reasons)
SHARD_BITS = 32  # global id = shard index << 32 | candidate number


@dataclasses.dataclass(frozen=True)
class JoinTask:
    """Keys in [part * 2**64 / parts, (part + 1) * 2**64 / parts) of one band (or of the exact keys)."""

    band: int  # -1: the exact-duplicate keys
    part: int
    parts: int
    kind: str = "minhash"  # exact, minhash, simhash (pairs checked by Hamming distance), template (line counts)
    # or keys (a keyer's 64-bit keys, bloomdata.clean.steps.Keyer)
    file: str = ""  # kind keys: the keyer's file in each shard's work directory
    code: int = NEAR  # the reason code of the duplicates it finds (the exact keys: EXACT)

    @property
    def name(self) -> str:
        if self.kind == "keys":
            return f"{self.file.removesuffix('.npy')}-{self.part:04d}-of-{self.parts:04d}"
        what = {"exact": "exact", "template": "lines"}.get(self.kind) or \
            f"{'sim' if self.kind == 'simhash' else ''}band{self.band:03d}"
        return f"{what}-{self.part:04d}-of-{self.parts:04d}"

    @property
    def reason_code(self) -> int:
        return EXACT if self.kind == "exact" else self.code

    def bounds(self) -> tuple[int, int | None]:
        lo = (self.part << 64) // self.parts
        return lo, None if self.part == self.parts - 1 else ((self.part + 1) << 64) // self.parts


def join_dir(out_dir: str) -> str:
    return os.path.join(out_dir, WORK_DIR, "join")


def join_key(task: JoinTask, filter_keys: list[str]) -> str:
    return durable.content_key({"version": MARKER_VERSION, "task": dataclasses.asdict(task), "shards": filter_keys})


def _load(path: str) -> np.ndarray:
    return np.load(path, mmap_mode="r")  # only the searched slices are read


def _slice(keys: np.ndarray, lo: int, hi: int | None) -> tuple[int, int]:
    start = int(np.searchsorted(keys, np.uint64(lo), side="left"))
    stop = len(keys) if hi is None else int(np.searchsorted(keys, np.uint64(hi), side="left"))
    return start, stop


def _equal_key_pairs(high: np.ndarray, low: np.ndarray | None, gid: np.ndarray) -> np.ndarray:
    """(later, first) for every run of equal keys (high, and low when given), by global id."""
    if low is not None:
        order = np.lexsort((gid, low, high))
        high, low, gid = high[order], low[order], gid[order]
        same = (high[1:] == high[:-1]) & (low[1:] == low[:-1])
    else:
        order = np.lexsort((gid, high))
        high, gid = high[order], gid[order]
        same = high[1:] == high[:-1]
    starts = np.concatenate([[True], ~same])
    first = np.maximum.accumulate(np.where(starts, np.arange(len(gid)), 0))  # index of each run's first entry
    later = ~starts
    return np.stack([gid[later], gid[first[later]]], axis=1) if len(gid) else np.zeros((0, 2), np.uint64)


def _simhash_pairs(keys: np.ndarray, fingerprints: np.ndarray, gid: np.ndarray, distance: int) -> np.ndarray:
    """(later, earlier) for every two entries of a run of equal band keys whose fingerprints differ in at most
    ``distance`` bits: all such pairs, so the clusters are the components of the whole near-duplicate graph.
    Equal fingerprints first link to the first of them (exact duplicates make long runs), then the distinct
    ones of a run are compared at every offset d (runs of distinct fingerprints are short)."""
    same_fp = _equal_key_pairs(keys, fingerprints, gid)
    keep = ~np.isin(gid, same_fp[:, 0]) if len(same_fp) else np.ones(len(gid), bool)
    keys, fingerprints, gid = keys[keep], fingerprints[keep], gid[keep]
    order = np.lexsort((gid, keys))
    keys, fingerprints, gid = keys[order], fingerprints[order], gid[order]
    found = [same_fp]
    for d in range(1, len(gid)):
        same = keys[d:] == keys[:-d]
        if not same.any():
            break
        close = same & (np.bitwise_count(fingerprints[d:] ^ fingerprints[:-d]) <= distance)
        found.append(np.stack([gid[d:][close], gid[:-d][close]], axis=1))
    return np.concatenate(found).astype(np.uint64)


def range_task(task: JoinTask, directory: str, key: str, compute: Callable[[], tuple[np.ndarray, int]]) -> JoinManifest:
    """Run one range task idempotently: ``directory/<task>.npy`` holds what ``compute`` returns (an array and
    how many entries it read), then its marker; a valid marker is returned as is."""
    t0 = time.perf_counter()
    marker = os.path.join(directory, f"{task.name}.done.json")
    path = os.path.join(directory, f"{task.name}.npy")
    done = durable.read_manifest(marker, key, JoinManifest)
    if done is not None and os.path.isfile(path):
        return derive(done, reused=True)
    result, entries = compute()
    os.makedirs(directory, exist_ok=True)
    durable.write_with(path, lambda f: np.save(f, result.astype(np.uint64), allow_pickle=False))
    manifest = JoinManifest(task=task.name, entries=entries, pairs=len(result),
                            seconds=round(time.perf_counter() - t0, 3))
    durable.write_marker(marker, key, manifest.model_dump(mode="json", exclude={"reused"}))
    return manifest


def join(task: JoinTask, out_dir: str, shard_dirs: list[str], key: str, hamming_distance: int = 0) -> JoinManifest:
    """Stage 2 for one task: ``OUT/work/join/<task>.npy`` holds uint64[k, 2] (duplicate, first) pairs."""
    return range_task(task, join_dir(out_dir), key, lambda: _join_pairs(task, shard_dirs, hamming_distance))


def _join_pairs(task: JoinTask, shard_dirs: list[str], hamming_distance: int) -> tuple[np.ndarray, int]:
    lo, hi = task.bounds()
    columns: list[list[np.ndarray]] = [[], [], []]  # key (high), key (low) or fingerprint, global id
    file, rows = {"exact": ("exact.npy", (0, 1, 2)), "minhash": ("minhash.npy", (0, None, 1)),
                  "simhash": ("simhash.npy", (0, 2, 1)), "keys": (task.file, (0, None, 1))}[task.kind]
    for s, directory in enumerate(shard_dirs):
        table = _load(os.path.join(directory, file))
        if task.kind != "exact":
            table = table[task.band]
        start, stop = _slice(table[0], lo, hi)
        for column, row in zip(columns, rows):
            if row is not None:
                column.append(np.array(table[row, start:stop]))
        columns[2][-1] |= np.uint64(s << SHARD_BITS)
    high, low, gid = (np.concatenate(c) if c else np.zeros(0, np.uint64) for c in columns)
    if task.kind == "simhash":
        return _simhash_pairs(high, low, gid, hamming_distance), len(gid)
    return _equal_key_pairs(high, low if task.kind == "exact" else None, gid), len(gid)


def components(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, root of each node): the connected components of the edges ``pairs`` (uint64[k, 2]); a
    root is its component's smallest node."""
    nodes = np.unique(pairs)
    if len(nodes) == 0:
        return nodes, nodes
    u = np.searchsorted(nodes, pairs[:, 0])
    v = np.searchsorted(nodes, pairs[:, 1])
    parent = np.arange(len(nodes))
    while True:
        pu, pv = parent[u], parent[v]
        if np.array_equal(pu, pv):
            break
        low = np.minimum(pu, pv)
        np.minimum.at(parent, pu, low)  # hook each root to the smaller root it meets
        np.minimum.at(parent, pv, low)
        while True:  # pointer jumping until every node points at a root
            grand = parent[parent]
            if np.array_equal(grand, parent):
                break
            parent = grand
    return nodes, nodes[parent]


def resolve(out_dir: str, tasks: list[JoinTask], shards: int) -> list[np.ndarray]:
    """Stage 3: per shard, uint64[3, k] of (candidate, reason code, survivor's global id), by candidate.

    A removed document's reason is that of the first join (by reason code: exact keys first) that found it to
    be a later copy; one found by none (a first copy, linked to an earlier document only through others) takes
    the last code's (near_duplicate, when no keyer of the run's own found duplicates)."""
    later: dict[int, list[np.ndarray]] = {}
    every: list[np.ndarray] = []
    for task in tasks:
        pairs = np.load(os.path.join(join_dir(out_dir), f"{task.name}.npy"))
        every.append(pairs)
        later.setdefault(task.reason_code, []).append(pairs[:, 0])
    nodes, roots = components(np.concatenate(every) if every else np.zeros((0, 2), np.uint64))
    gone = nodes != roots
    removed, survivor = nodes[gone], roots[gone]
    codes = sorted(later)
    reason = np.full(len(removed), codes[-1] if codes else NEAR, dtype=np.uint64)
    for code in reversed(codes[:-1]):
        reason[np.isin(removed, np.concatenate(later[code]))] = code
    shard_of = removed >> np.uint64(SHARD_BITS)
    local = removed & np.uint64((1 << SHARD_BITS) - 1)
    # `removed` is sorted (np.unique's nodes), so each shard's candidates are one run, in order: its bounds by
    # binary search (a mask per shard was O(shards x removed): hours at 100,000 files with millions removed)
    bounds = np.searchsorted(shard_of, np.arange(shards + 1, dtype=np.uint64)).tolist()
    return [np.stack([local[a:b], reason[a:b], survivor[a:b]]) for a, b in zip(bounds, bounds[1:])]
