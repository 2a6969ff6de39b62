"""Clean corpora before tokenization: ROOTS-style per-language filters, exact and near-duplicate removal, PII
redaction, on Dask; config, per-shard steps, band joins, run, summary and report."""

from bloomdata.clean.config import DATA_DIR, PRESETS, REMOVED_FILE, SUMMARY_FILE, CleanConfig
from bloomdata.clean.run import dry_run_clean, run_clean
from bloomdata.clean.summary import CleanSummary, format_summary

# This package's files in layers, lowest first: a file imports only files of lower layers (every import, those
# inside functions and under TYPE_CHECKING too; tests/test_layering.py checks it, and that no file is left out).
LAYERS = (
    "config roots closed_class parts",  # the settings and the filter-step registry; shipped word lists; part files
    "text minhash plan",  # normalization and words; MinHash keys; --dry-run's part sizes
    "measures lang_models pii",  # ROOTS's measures; fastText, KenLM and sentencepiece; PII redaction
    "language simhash summary",  # one language's settings and a document; SimHash; what a run records
    "steps dedup report",  # the filter steps (one class each); band joins; clean.md and clean.png
    "quality_filter templates",  # each language's steps, run in order; template lines
    "shard write",  # stage 1 and stage 4 of one shard
    "run",  # the run: plan, stages, summary
    "__init__",
)

__all__ = ["DATA_DIR", "PRESETS", "REMOVED_FILE", "SUMMARY_FILE", "CleanConfig", "CleanSummary", "dry_run_clean", "format_summary", "run_clean"]
