"""Tokenize corpora into Megatron ``.bin/.idx`` datasets on Dask: config, per-shard step, executor, run."""

from bloomdata.build.config import REJECTS_FILE, SHARDS_DIR, SUMMARY_FILE, BuildConfig
from bloomdata.build.run import dry_run_build, plan_build, run_build
from bloomdata.build.summary import BuildSummary, format_summary

__all__ = ["REJECTS_FILE", "SHARDS_DIR", "SUMMARY_FILE", "BuildConfig", "BuildSummary", "dry_run_build",
           "format_summary", "plan_build", "run_build"]
