"""Clean corpora before tokenization: ROOTS-style per-language filters, exact and near-duplicate removal, PII
redaction, on Dask; config, per-shard steps, band joins, run, summary and report."""

from bloomdata.clean.config import DATA_DIR, PRESETS, REMOVED_FILE, SUMMARY_FILE, CleanConfig
from bloomdata.clean.run import run_clean
from bloomdata.clean.summary import CleanSummary, format_summary

__all__ = ["DATA_DIR", "PRESETS", "REMOVED_FILE", "SUMMARY_FILE", "CleanConfig", "CleanSummary", "format_summary", "run_clean"]
