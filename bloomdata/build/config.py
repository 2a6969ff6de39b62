"""``BuildConfig``: everything a build needs (shared by ``bloomdata build`` and the Prefect flow), and the
names of the files it writes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.config_loader import DASHBOARD, cli_option
from bloomdata.readers import ShardBytes, SourceConfig, shard_bytes_field, sources_field
from bloomdata.tokenizer.encoder import ENCODER_HELP, EncoderKind

MARKER_VERSION = 2  # bump when the shard output format changes: every old marker becomes invalid
SUMMARY_FILE = "build_summary.json"
REJECTS_FILE = "rejects.jsonl"
SHARDS_DIR = "shards"
LOCK_FILE = ".bloomdata-build.lock"


class BuildConfig(BaseModel):
    """Everything a build needs (shared by ``bloomdata build`` and the Prefect flow)."""

    model_config = ConfigDict(extra="forbid")

    sources: list[SourceConfig] = sources_field()
    tokenizer: str = Field(description="tokenizer.json or a directory holding one")
    encoder: EncoderKind = Field(default="auto", description=ENCODER_HELP)
    out_dir: str = Field(description="output directory: OUT_DIR/<name>.bin/.idx, summary, rejects",
                         json_schema_extra=cli_option("--out", metavar="DIR"))
    append_eod: bool = Field(default=False, description="append eod_token to every document (Megatron --append-eod)")
    eod_token: str = Field(default="</s>", description="the end-of-document token append_eod appends (BLOOM's "
                           "</s>; GPT-2's <|endoftext|>)")
    split_by: Literal["lang", "none"] = Field(default="lang", description="one output per language, or one")
    output_name: str = Field(default="all", pattern=r"^[A-Za-z0-9_.-]+$",
                             description="output prefix name with split_by='none'")
    workers: int = Field(default=2, ge=0, description="LocalCluster worker processes (0: run in-process); also the "
                         "worker count the shards are planned for (with --scheduler too)")
    scheduler: str | None = Field(default=None, description="tcp://host:port of an existing Dask scheduler",
                                  json_schema_extra=cli_option(metavar="ADDR"))
    dashboard: bool = Field(default=False, description=DASHBOARD)
    shard_bytes: ShardBytes = shard_bytes_field()
    max_rows_per_shard: int | None = Field(default=None, ge=1, description="cut larger files into row ranges "
                                           "instead of by size (planning counts every row)")
    strict: bool = Field(default=False, description="the first rejected row is an error naming file:line")
    allow_empty: bool = Field(default=False, description="inputs that yield no document write empty datasets "
                              "(else: an error naming the files and the top reject reason)")
    batch_docs: int = Field(default=1000, ge=1, description="documents per encode_batch call")
    batch_bytes: int = Field(default=8 << 20, ge=1, description="characters per encode_batch call (memory)")
    max_reject_examples: int = Field(default=20, ge=0, description="examples per reason in rejects.jsonl")
    keep_shards: bool = Field(default=False, description="keep OUT_DIR/shards after the merge")
    progress: bool = Field(default=True, description="tqdm progress bar on stderr")

