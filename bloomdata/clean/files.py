"""The names of what a clean run writes under its output directory, and the version of its work files."""

from __future__ import annotations

MARKER_VERSION = 3  # bump when a work file's format changes: every old marker becomes invalid
SUMMARY_FILE = "clean_summary.json"
REMOVED_FILE = "removed.jsonl.zst"
REPORT_MD = "clean.md"
REPORT_PNG = "clean.png"
DATA_DIR = "data"  # OUT/data/<lang>/part-*.jsonl.zst: what `bloomdata build --input OUT/data` reads
WORK_DIR = "work"  # per-shard candidates, keys and markers (removed at the end)
LOCK_FILE = ".bloomdata-clean.lock"
EMPTY = "empty"  # a document with no text left (as read, or after a modifier): the reason before any filter's
