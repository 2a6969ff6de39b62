"""Clean corpora before tokenization: ROOTS-style per-language filters, exact and near-duplicate removal, PII
redaction, on Dask; config, per-shard steps, band joins, run, summary and report."""

from bloomdata.clean.config import PRESETS, CleanConfig
from bloomdata.clean.files import DATA_DIR, REMOVED_FILE, SUMMARY_FILE
from bloomdata.clean.run import dry_run_clean, run_clean
from bloomdata.clean.summary import CleanSummary, format_summary

# This package's files in layers, lowest first: a file imports only files of lower layers (every import, those
# inside functions and under TYPE_CHECKING too; tests/test_layering.py checks it, and that no file is left out).
LAYERS = (
    "files sections roots closed_class parts",  # what a run writes; the settings sections; shipped lists; parts
    "text minhash plan",  # normalization and words; MinHash keys; --dry-run's part sizes
    "measures lang_models pii",  # ROOTS's measures; fastText, KenLM and sentencepiece; PII redaction
    "language simhash summary",  # one language's settings and a document; SimHash; what a run records
    "dedup",  # band joins and duplicate clusters
    "steps templates",  # the three kinds of step; template lines
    "filters modifiers keyers",  # the shipped steps, one class each
    "builtin",  # the shipped steps, listed
    "settings report",  # the steps a config names, one language's settings; clean.md and clean.png
    "config",  # CleanConfig
    "quality_filter",  # the steps of a run, built from its config and run in order
    "shard write",  # stage 1 and stage 4 of one shard
    "run",  # the run: plan, stages, summary
    "__init__",
)

__all__ = ["DATA_DIR", "PRESETS", "REMOVED_FILE", "SUMMARY_FILE", "CleanConfig", "CleanSummary", "dry_run_clean",
           "format_summary", "run_clean"]
