"""The catalogue's dedup_template (bigscience-workshop/data-preparation, 01a_catalogue_cleaning_and_filtering/
clean_helpers/deduplication.py, ``dedup_template_soft``): lines of at least ``min_line_chars`` characters
(stripped) that occur at least ``min_occurrences`` times in the dataset are template lines (menus, cookie
banners, footers), removed from every document; every line of a document is stripped, as there.

As in the catalogue, where ``dedup_document`` ran first, lines are counted over the documents that survive
deduplication (and the filters), so ten copies of one page do not make its lines templates. Here, after
``resolve``:

1. stage 1 (``filter_shard``) spilled each shard's ``lines.npy``: uint64[2, L], (line hash, candidate) of its
   candidates' long lines, sorted by hash (xxh3-64 of the stripped line's UTF-8);
2. ``count`` tasks, one per hash range (the band joins' ranges), read that range of every shard's file, drop
   the lines of removed candidates and keep the hashes seen ``min_occurrences`` times or more;
3. the write stage drops those lines (``remove_template_lines``), then a document left empty goes as
   ``empty`` and the small-document steps (``bytes``, ``space_words``) run again on what is left, the
   catalogue's filter_remove_empty_docs and filter_small_docs after dedup_template.
"""

from __future__ import annotations

import os

import numpy as np
import xxhash

from bloomdata import durable
from bloomdata.clean.dedup import SHARD_BITS, JoinTask, _load, _slice, range_task
from bloomdata.clean.files import WORK_DIR
from bloomdata.clean.sections import TemplateDedupConfig
from bloomdata.clean.summary import JoinManifest

LINES_FILE = "lines.npy"
TEMPLATES_FILE = "templates.npy"


def line_hashes(text: str, min_chars: int) -> list[int]:
    """xxh3-64 of each stripped line of at least ``min_chars`` characters."""
    return [xxhash.xxh3_64_intdigest(line.encode("utf-8"))
            for line in (raw.strip() for raw in text.split("\n")) if len(line) >= min_chars]


def sorted_lines(hashes: list[int], candidates: list[int]) -> np.ndarray:
    """uint64[2, L]: (hash, candidate) sorted by hash, then candidate."""
    table = np.array([hashes, candidates], dtype=np.uint64).reshape(2, -1)
    order = np.lexsort((table[1], table[0]))
    return table[:, order]


def template_dir(out_dir: str) -> str:
    return os.path.join(out_dir, WORK_DIR, "templates")


def count(task: JoinTask, out_dir: str, shard_dirs: list[str], removed: list[str], key: str,
          min_occurrences: int) -> JoinManifest:
    """One hash range: ``OUT/work/templates/<task>.npy`` holds the sorted template hashes in it."""

    def templates() -> tuple[np.ndarray, int]:
        lo, hi = task.bounds()
        hashes = []
        for directory, resolve_file in zip(shard_dirs, removed):
            table = _load(os.path.join(directory, LINES_FILE))
            start, stop = _slice(table[0], lo, hi)
            gone = np.load(resolve_file)[0]  # candidates removed as duplicates
            hashes.append(np.array(table[0, start:stop])[~np.isin(table[1, start:stop], gone)])
        every = np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)
        values, counts = np.unique(every, return_counts=True)
        return values[counts >= min_occurrences], len(every)

    return range_task(task, template_dir(out_dir), key, templates)


def gather(out_dir: str, tasks: list[JoinTask]) -> tuple[str, str]:
    """Every range's template hashes in ``OUT/work/templates.npy`` (sorted); returns (path, digest)."""
    parts = [np.load(os.path.join(template_dir(out_dir), f"{t.name}.npy")) for t in tasks]
    templates = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
    path = os.path.join(out_dir, WORK_DIR, TEMPLATES_FILE)
    durable.write_with(path, lambda f: np.save(f, templates, allow_pickle=False))
    return path, durable.digest(templates.tobytes())


def remove_template_lines(text: str, templates: np.ndarray, config: TemplateDedupConfig) -> str:
    """The document's stripped lines without its template lines, joined by newlines."""
    lines = [raw.strip() for raw in text.split("\n")]
    long = [i for i, line in enumerate(lines) if len(line) >= config.min_line_chars]
    if long:
        hashes = np.array([xxhash.xxh3_64_intdigest(lines[i].encode("utf-8")) for i in long], dtype=np.uint64)
        drop = {long[j] for j in np.flatnonzero(np.isin(hashes, templates))}
        if drop:
            lines = [line for i, line in enumerate(lines) if i not in drop]
    return "\n".join(lines)


__all__ = ["SHARD_BITS", "count", "gather", "line_hashes", "remove_template_lines", "sorted_lines"]
