"""``bloomdata clean --dry-run``'s estimate of each part file, as if every document were kept.

The filters and the deduplication only remove documents, so each estimate is an upper bound of its part (the
normalization and the PII redaction change a few characters). The first documents of each of the first
``SAMPLE_FILES`` input files are written as the write stage writes them (one JSON line of text and language each,
one zstd frame at ``ZSTD_LEVEL``) and scaled to the file (``bloomdata.dry_run.scale_to_file``); a file's estimate is
split over its shards by their byte ranges (evenly over row ranges). Parquet parts are not estimated.
"""

from __future__ import annotations

import json
from collections import Counter

import zstandard

from bloomdata.clean.parts import ZSTD_LEVEL
from bloomdata.dry_run import SAMPLE_FILES, sample_documents, scale_to_file
from bloomdata.readers import Shard, input_bytes


def _file_estimate(shard: Shard) -> int:
    """The bytes of one file's documents as one jsonl.zst part."""
    docs, complete = sample_documents(shard)
    lines = b"".join(json.dumps({"text": d.text, "lang": d.lang}, ensure_ascii=False).encode() + b"\n"
                     for d in docs)
    return round(len(zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(lines)) * scale_to_file(shard, docs, complete))


def part_estimates(shards: list[Shard], output_format: str) -> list[int | None]:
    """Per shard (plan order), about the most bytes its part file takes (None: not estimated)."""
    if output_format != "jsonl.zst":
        return [None] * len(shards)
    files = list({s.path: s for s in shards}.values())
    per_file = {s.path: _file_estimate(s) for s in files[:SAMPLE_FILES]}
    sampled_in = sum(input_bytes(p) for p in per_file) or 1
    ratio = sum(per_file.values()) / sampled_in  # for the files past the sample: output bytes per input byte
    pieces = Counter(s.path for s in shards)
    out: list[int | None] = []
    for s in shards:
        size = input_bytes(s.path)
        whole = per_file.get(s.path, round(size * ratio))
        share = (s.byte_range[1] - s.byte_range[0]) / size if s.byte_range and size else 1 / pieces[s.path]
        out.append(round(whole * share))
    return out
