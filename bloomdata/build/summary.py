"""What a build records: the per-shard manifest (its completion marker) and the build summary, typed.

Both are written with ``bloomdata.durable.write_marker``: ``{"key": ..., **model}``, atomically, after every
file they vouch for. A shard's key is ``durable.content_key`` of what determines its bytes (``shard_key``
in ``bloomdata.build.shard``); the summary's key, also stored as ``fingerprint``, is the content key of every
shard key plus the output names and reject settings, so an unchanged rerun finds it and does nothing.

On disk the field names are the ones ``build_summary.json`` always had; readers ignore fields they do not
know (the marker's ``key``), so a summary from an older build that lacks a field simply does not match and
the build runs again.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class PartStats(BaseModel):
    """One output name's part of one shard: ``OUT_DIR/shards/<shard>/<name>.bin/.idx``."""

    documents: int
    tokens: int
    bin_bytes: int
    idx_bytes: int


class ShardManifest(BaseModel):
    """A finished shard (the payload of ``OUT_DIR/shards/<shard>.done.json``)."""

    shard: str  # Shard.name
    identity: dict[str, Any]  # what the key was computed from (shard_key), for people reading the marker
    outputs: dict[str, PartStats]  # output name -> its part files
    rows: int  # rows (lines) read: documents + rejects; turns a byte-range shard's lines into file lines
    text_bytes: int  # UTF-8 bytes of the accepted documents' texts
    documents: int
    tokens: int
    rejects: dict[str, int]  # reason -> rows rejected
    # Reject fields (path, line, reason, detail), at most N per reason; a byte-range shard's lines count from
    # its first line (the build's rejects file and --strict give file lines)
    reject_examples: list[dict[str, Any]]
    seconds: float
    cpu_seconds: float  # < seconds: the worker waited on I/O or on the CPU
    reused: bool = False  # set on return when the marker was found valid; never True on disk


class OutputStats(BaseModel):
    """One merged dataset ``OUT_DIR/<name>.bin/.idx``."""

    prefix: str
    documents: int
    sequences: int
    tokens: int
    bin_bytes: int
    idx_bytes: int


class ShardCounts(BaseModel):
    total: int
    built: int
    reused: int


class BuildSummary(BaseModel):
    """``OUT_DIR/build_summary.json``, and what ``run_build`` returns."""

    out_dir: str
    outputs: dict[str, OutputStats]
    documents: int
    tokens: int
    text_bytes_in: int  # UTF-8 bytes of the documents' texts
    input_file_bytes: int  # bytes of the input files (compressed, with markup)
    bytes_out: int  # .bin + .idx of every output
    rejects: dict[str, int]  # every known reason, 0 included
    rejects_total: int
    rejects_file: str
    shards: ShardCounts
    shard_bytes: int | None = None  # the size large files were cut to (None: whole files or row ranges)
    unsplittable_inputs: list[str] = []  # inputs over shard_bytes that stay one shard (compressed streams...)
    tokenizer: str
    tokenizer_sha256: str | None
    dtype: str
    append_eod: bool
    split_by: str
    workers: int | None  # None: an external cluster (scheduler or client)
    scheduler: str | None
    wall_seconds: float
    tokenize_seconds: float
    merge_seconds: float
    shard_cpu_seconds: float  # all workers together, shards built in this run only
    # throughput of the work done in this run (reused shards excluded), over the whole wall time
    throughput_mb_s: float
    tokens_per_s: float
    fingerprint: str  # the marker's key: equal fingerprints mean an equal build
    up_to_date: bool = False  # True when this run found the outputs current and did nothing


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def _size(n: int) -> str:
    return f"{n / 1e3:,.1f} KB" if n < 1e6 else _mb(n)


def format_summary(summary: BuildSummary) -> str:
    """The build summary as a short text table (the same facts as build_summary.json)."""
    s = summary
    lines = [f"build summary ({s.out_dir}){'  [up to date: nothing to do]' if s.up_to_date else ''}"]
    width = max([len(n) for n in s.outputs] + [6])
    lines.append(f"  {'output':<{width}} {'documents':>11} {'tokens':>14} {'bin':>12}")
    for name, o in s.outputs.items():
        lines.append(f"  {name:<{width}} {o.documents:>11,} {o.tokens:>14,} {_mb(o.bin_bytes):>12}")
    lines.append(f"  {'total':<{width}} {s.documents:>11,} {s.tokens:>14,} {_mb(s.bytes_out):>12}")
    cut = f"; large files cut at {_size(s.shard_bytes)}" if s.shard_bytes else ""
    lines.append(f"  dtype {s.dtype}, append_eod {s.append_eod}, shards {s.shards.total} "
                 f"({s.shards.built} built, {s.shards.reused} reused{cut})")
    if s.unsplittable_inputs:
        names = ", ".join(s.unsplittable_inputs[:3]) + (", ..." if len(s.unsplittable_inputs) > 3 else "")
        lines.append(f"  {len(s.unsplittable_inputs)} input(s) over {_size(s.shard_bytes or 0)} could not be cut into "
                     f"shards (a compressed stream, or one row group or record batch), one worker each: {names}")
    lines.append(f"  bytes in: {_mb(s.text_bytes_in)} of text ({_mb(s.input_file_bytes)} of files); "
                 f"bytes out: {_mb(s.bytes_out)}")
    rejected = {k: v for k, v in s.rejects.items() if v}
    lines.append(f"  rejects: {s.rejects_total:,}" + (f" {rejected} (examples: {s.rejects_file})" if rejected else ""))
    lines.append(f"  wall {s.wall_seconds:.1f} s (tokenize {s.tokenize_seconds:.1f} s, merge "
                 f"{s.merge_seconds:.1f} s): {s.throughput_mb_s:.2f} MB/s, {s.tokens_per_s:,.0f} tokens/s")
    return "\n".join(lines)
