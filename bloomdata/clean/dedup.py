"""Stages 2 and 3 of a clean run: join the spilled keys per band, then decide which copies go.

Stage 2 (``join``, one task per key range of each band and of the exact keys, on Dask): every shard's
stage-1 file holds its keys sorted, so a task memory-maps each file, binary-searches its range and reads
only that slice (datatrove's MinHash stages do the same with per-bucket files: signatures are never
collected in one dict). It sorts its entries by (key, global id) and, for every run of equal keys, writes
one pair (document, first document of the run) per later document. A global id is ``shard index << 32 |
candidate number``, so "first" means first in plan order, whatever the scheduling. Memory: ~40 bytes per
entry of its range; ``near_dedup.docs_per_task`` sets how many ranges a band is cut into.

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

import numpy as np

from bloomdata import durable
from bloomdata.clean.config import MARKER_VERSION, WORK_DIR, CleanConfig
from bloomdata.clean.summary import JoinManifest

EXACT, NEAR = 0, 1  # removal reason codes in the resolve files
SHARD_BITS = 32  # global id = shard index << 32 | candidate number


@dataclasses.dataclass(frozen=True)
class JoinTask:
    """Keys in [part * 2**64 / parts, (part + 1) * 2**64 / parts) of one band (or of the exact keys)."""

    band: int  # -1: the exact-duplicate keys
    part: int
    parts: int

    @property
    def name(self) -> str:
        what = "exact" if self.band < 0 else f"band{self.band:03d}"
        return f"{what}-{self.part:04d}-of-{self.parts:04d}"

    def bounds(self) -> tuple[int, int | None]:
        lo = (self.part << 64) // self.parts
        return lo, None if self.part == self.parts - 1 else ((self.part + 1) << 64) // self.parts


def plan_joins(config: CleanConfig, candidates: int) -> list[JoinTask]:
    """Every join task, in a fixed order: exact ranges, then each band's ranges."""
    parts = max(1, -(-candidates // config.near_dedup.docs_per_task))
    bands = ([-1] if config.exact_dedup.enabled else []) + \
        (list(range(config.near_dedup.bands)) if config.near_dedup.enabled else [])
    return [JoinTask(band, part, parts) for band in bands for part in range(parts)]


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


def join(task: JoinTask, out_dir: str, shard_dirs: list[str], key: str) -> JoinManifest:
    """Stage 2 for one task: ``OUT/work/join/<task>.npy`` holds uint64[k, 2] (duplicate, first) pairs."""
    t0 = time.perf_counter()
    marker = os.path.join(join_dir(out_dir), f"{task.name}.done.json")
    path = os.path.join(join_dir(out_dir), f"{task.name}.npy")
    done = durable.read_manifest(marker, key, JoinManifest)
    if done is not None and os.path.isfile(path):
        return done.model_copy(update={"reused": True})
    lo, hi = task.bounds()
    columns: list[list[np.ndarray]] = [[], [], []]  # key (high), key (low; exact only), global id
    for s, directory in enumerate(shard_dirs):
        if task.band < 0:
            table = _load(os.path.join(directory, "exact.npy"))
            start, stop = _slice(table[0], lo, hi)
            parts = (table[0, start:stop], table[1, start:stop], table[2, start:stop])
        else:
            table = _load(os.path.join(directory, "minhash.npy"))[task.band]
            start, stop = _slice(table[0], lo, hi)
            parts = (table[0, start:stop], None, table[1, start:stop])
        columns[0].append(np.array(parts[0]))
        if parts[1] is not None:
            columns[1].append(np.array(parts[1]))
        columns[2].append(np.array(parts[2]) | np.uint64(s << SHARD_BITS))
    high = np.concatenate(columns[0]) if columns[0] else np.zeros(0, np.uint64)
    gid = np.concatenate(columns[2]) if columns[2] else np.zeros(0, np.uint64)
    if task.band < 0:
        low = np.concatenate(columns[1])
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
    pairs = np.stack([gid[later], gid[first[later]]], axis=1) if len(gid) else np.zeros((0, 2), np.uint64)
    os.makedirs(join_dir(out_dir), exist_ok=True)
    durable.write_with(path, lambda f: np.save(f, pairs.astype(np.uint64), allow_pickle=False))
    manifest = JoinManifest(task=task.name, entries=len(gid), pairs=len(pairs), seconds=round(time.perf_counter() - t0, 3))
    durable.write_marker(marker, key, manifest.model_dump(mode="json", exclude={"reused"}))
    return manifest


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
    """Stage 3: per shard, uint64[3, k] of (candidate, reason code, survivor's global id), by candidate."""
    exact, near = [], []
    for task in tasks:
        pairs = np.load(os.path.join(join_dir(out_dir), f"{task.name}.npy"))
        (exact if task.band < 0 else near).append(pairs)
    exact_pairs = np.concatenate(exact) if exact else np.zeros((0, 2), np.uint64)
    every = np.concatenate([exact_pairs, *near]) if near or exact else np.zeros((0, 2), np.uint64)
    nodes, roots = components(every)
    gone = nodes != roots
    removed, survivor = nodes[gone], roots[gone]
    reason = np.where(np.isin(removed, exact_pairs[:, 0]), EXACT, NEAR).astype(np.uint64)
    shard_of = removed >> np.uint64(SHARD_BITS)
    local = removed & np.uint64((1 << SHARD_BITS) - 1)
    out = []
    for s in range(shards):
        mine = shard_of == s  # `removed` is sorted, so each shard's candidates come in order
        out.append(np.stack([local[mine], reason[mine], survivor[mine]]))
    return out
