"""Streaming readers: every supported corpus format becomes an iterator of ``Document`` or ``Reject``.

Shared by the tokenizer trainer and the parallel build:

- ``SourceConfig`` (sources.py): where one source's files are and how to read them;
- ``plan_shards`` / ``shard_plan`` / ``read_shard`` / ``iter_documents`` (shards.py): deterministic work
  units (whole files, row ranges or byte ranges of large ones), streamed;
- ``Document`` / ``Reject`` / ``Shard`` (records.py): what flows between them;
- ``Reader`` (base.py): one format in one class; registry.py lists the built-in ones (``BUILTINS``) and finds a
  file's or a config's reader (a user's as ``package.module:ClassName``);
- one module per format: jsonl.py, json_array.py, delimited.py (csv, tsv), columnar.py (parquet, arrow), txt.py;
  compressed.py decompresses .gz/.zst/.bz2/.xz; fs.py opens local paths and fsspec URLs (s3://, gs://, http(s)://,
  hf://, ...).
"""

from bloomdata.readers.base import Reader
from bloomdata.readers.fs import input_bytes, input_stamp
from bloomdata.readers.records import (
    REJECT_REASONS,
    UNKNOWN_LANG,
    Document,
    Reject,
    Shard,
    no_documents_error,
    output_name_of,
    validate_row,
)
from bloomdata.readers.registry import BUILTINS, format_of, reader_for
from bloomdata.readers.shards import (
    ShardBytes,
    ShardPlan,
    count_rows,
    empty_inputs_error,
    file_line,
    file_line_offsets,
    file_reject,
    iter_documents,
    plan_job,
    plan_shards,
    read_shard,
    shard_bytes_field,
    shard_plan,
)
from bloomdata.readers.sources import (
    Format,
    SourceConfig,
    resolve_files,
    source_from_spec,
    sources_field,
)

__all__ = [
    "BUILTINS", "REJECT_REASONS", "UNKNOWN_LANG", "Document", "Format", "Reader", "Reject", "Shard", "ShardBytes",
    "ShardPlan", "SourceConfig", "count_rows", "empty_inputs_error", "file_line", "file_line_offsets", "file_reject",
    "format_of", "input_bytes", "input_stamp", "iter_documents", "no_documents_error", "output_name_of", "plan_job",
    "plan_shards", "read_shard", "reader_for", "resolve_files", "shard_bytes_field", "shard_plan", "source_from_spec",
    "sources_field", "validate_row",
]
