"""What a clean run records: per-task manifests (its completion markers), per-language counts and the summary.

All are written with ``bloomdata.durable.write_marker`` (``{"key": ..., **model}``) after every file they
vouch for. Counts are per output name (``bloomdata.readers.output_name_of`` of the documents' lang).
Bytes are UTF-8 bytes of text: ``bytes_in`` and ``removed_bytes`` of the text as read, ``bytes_kept`` of
the text as written (normalized and redacted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from bloomdata.clean.pii import Redaction
from bloomdata.readers import REJECT_REASONS


class LangCounts(BaseModel):
    """One language's documents and bytes in, kept, and removed per reason."""

    documents_in: int = 0
    bytes_in: int = 0
    documents_kept: int = 0
    bytes_kept: int = 0
    removed: dict[str, int] = Field(default_factory=dict)  # reason -> documents
    removed_bytes: dict[str, int] = Field(default_factory=dict)  # reason -> bytes as read
    emails_redacted: int = 0
    ips_redacted: int = 0
    keys_redacted: int = 0
    users_redacted: int = 0

    def redacted(self, redaction: Redaction) -> None:
        """Count a ``bloomdata.clean.pii.Redaction``."""
        self.emails_redacted += redaction.emails
        self.ips_redacted += redaction.ips
        self.keys_redacted += redaction.keys
        self.users_redacted += redaction.users

    def remove(self, reason: str, nbytes: int, documents: int = 1) -> None:
        self.removed[reason] = self.removed.get(reason, 0) + documents
        self.removed_bytes[reason] = self.removed_bytes.get(reason, 0) + nbytes

    def add(self, other: LangCounts) -> None:
        for field in ("documents_in", "bytes_in", "documents_kept", "bytes_kept", "emails_redacted", "ips_redacted",
                      "keys_redacted", "users_redacted"):
            setattr(self, field, getattr(self, field) + getattr(other, field))
        for reason, n in other.removed.items():
            self.remove(reason, other.removed_bytes.get(reason, 0), n)


class FilterManifest(BaseModel):
    """A filtered shard (stage 1): ``OUT/work/filter/<shard>.done.json``."""

    shard: str  # Shard.name
    identity: dict[str, Any]  # what the key was computed from, for people reading the marker
    candidates: int  # documents that passed the filters (before deduplication)
    rows: int  # rows read (documents and rejects): turns a byte-range shard's lines into file lines
    languages: dict[str, LangCounts]  # output name -> counts; documents_kept = candidates
    rejects: dict[str, int]  # reader reject reason -> rows
    examples: int  # lines in the shard's removed.jsonl
    step_seconds: dict[str, float]  # read, normalize, filter, pii, exact_hash, minhash, write
    seconds: float
    cpu_seconds: float
    reused: bool = False  # set on return when the marker was found valid; never True on disk


class JoinManifest(BaseModel):
    """A finished band join (stage 2): ``OUT/work/join/<task>.done.json``."""

    task: str
    entries: int  # (key, document) entries read from every shard
    pairs: int  # (duplicate, earlier document) pairs written
    seconds: float
    reused: bool = False


class PartStats(BaseModel):
    """One language's output part of one shard: ``OUT/data/<name>/<part>``."""

    file: str  # relative to OUT
    documents: int
    bytes: int  # UTF-8 bytes of the texts
    file_bytes: int


class WriteManifest(BaseModel):
    """A written shard (stage 3): ``OUT/work/write/<shard>.done.json``."""

    shard: str
    parts: dict[str, PartStats]  # output name -> part
    removed: dict[str, LangCounts]  # output name -> duplicates removed (removed and removed_bytes only)
    examples: int
    seconds: float
    reused: bool = False


class OutputStats(BaseModel):
    """Everything written for one language: ``OUT/data/<name>/``."""

    directory: str
    files: list[str]  # relative to OUT, in plan order
    documents: int
    bytes: int
    file_bytes: int


class ShardCounts(BaseModel):
    total: int
    built: int
    reused: int


class CleanSummary(BaseModel):
    """``OUT/clean_summary.json``, and what ``run_clean`` returns."""

    out_dir: str
    data_dir: str  # OUT/data: give it to `bloomdata build --input` and the tokenizer trainer
    output_format: str
    languages: dict[str, LangCounts]  # output name -> counts after every step
    outputs: dict[str, OutputStats]
    documents_in: int
    documents_kept: int
    bytes_in: int
    bytes_kept: int
    removed: dict[str, int] = Field(default_factory=dict)  # every reason of the run's steps, in step order
    rejects: dict[str, int] = Field(default_factory=lambda: dict.fromkeys(REJECT_REASONS, 0))  # unreadable rows
    rejects_total: int = 0
    emails_redacted: int = 0
    ips_redacted: int = 0
    keys_redacted: int = 0
    users_redacted: int = 0
    removed_file: str
    report_md: str
    report_png: str
    shards: ShardCounts
    join_tasks: int
    workers: int | None  # None: an external cluster (scheduler or client)
    scheduler: str | None
    wall_seconds: float
    stage_seconds: dict[str, float]  # filter, join, resolve, write, report (wall)
    step_seconds: dict[str, float]  # per step, CPU of every worker together (shards filtered in this run)
    throughput_mb_s: float  # MB of input text filtered in this run per wall second
    fingerprint: str  # the marker's key: equal fingerprints mean an equal run
    up_to_date: bool = False  # True when this run found the outputs current and did nothing
    settings_name: str = "default"  # CleanConfig.settings_name: the preset (default, roots) or the user's name
    notes: list[str] = Field(default_factory=list)  # how the settings applied (word rules, models not given)

    def reasons_seen(self) -> list[str]:
        """The removal reasons that removed anything, in step order (the order of ``removed``, which names every
        reason of the run's steps)."""
        return [r for r in self.removed if any(c.removed.get(r) for c in self.languages.values())]


def _mb(n: int) -> str:
    return f"{n / 1e6:,.2f} MB"


def format_summary(summary: CleanSummary) -> str:
    """The summary as a short text table (the same facts as clean_summary.json)."""
    s = summary
    lines = [f"clean summary ({s.out_dir}){'  [up to date: nothing to do]' if s.up_to_date else ''}"]
    width = max([len(n) for n in s.languages] + [8])
    lines.append(f"  {'language':<{width}} {'docs in':>9} {'kept':>9} {'bytes in':>12} {'bytes kept':>12}")
    for name, c in s.languages.items():
        lines.append(f"  {name:<{width}} {c.documents_in:>9,} {c.documents_kept:>9,} {_mb(c.bytes_in):>12} "
                     f"{_mb(c.bytes_kept):>12}")
    lines.append(f"  {'total':<{width}} {s.documents_in:>9,} {s.documents_kept:>9,} {_mb(s.bytes_in):>12} "
                 f"{_mb(s.bytes_kept):>12}")
    removed = {k: v for k, v in s.removed.items() if v}
    lines.append(f"  removed: {sum(removed.values()):,} {removed if removed else ''}".rstrip())
    rejected = {k: v for k, v in s.rejects.items() if v}
    lines.append(f"  unreadable rows: {s.rejects_total:,}" + (f" {rejected}" if rejected else ""))
    lines.append(f"  redacted: {s.emails_redacted:,} e-mail and {s.ips_redacted:,} IP addresses, "
                 f"{s.keys_redacted:,} keys, "
                 f"{s.users_redacted:,} user names; examples: "
                 f"{s.removed_file}; report: {s.report_md}")
    lines.append(f"  shards {s.shards.total} ({s.shards.built} filtered, {s.shards.reused} reused), "
                 f"{s.join_tasks} join tasks; cleaned data: {s.data_dir}")
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in s.stage_seconds.items())
    lines.append(f"  wall {s.wall_seconds:.1f} s ({stages}): {s.throughput_mb_s:.2f} MB/s")
    return "\n".join(lines)
