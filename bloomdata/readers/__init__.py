"""Streaming readers: every supported corpus format becomes an iterator of ``Document`` or ``Reject``.

Shared by the tokenizer trainer and the parallel build:

- ``SourceConfig`` (sources.py): where one source's files are and how to read them;
- ``plan_shards`` / ``shard_plan`` / ``read_shard`` / ``iter_documents`` (shards.py): deterministic work
  units (whole files, row ranges or byte ranges of large ones), streamed;
- ``Document`` / ``Reject`` / ``Shard`` (records.py): what flows between them;
- one module per format: jsonl.py, columnar.py (parquet, arrow), txt.py; compressed.py opens .gz/.zst.
"""

from bloomdata.readers.records import (
    REJECT_REASONS,
    UNKNOWN_LANG,
    Document,
    Reject,
    Shard,
    output_name_of,
    validate_row,
)
from bloomdata.readers.shards import (
    ShardBytes,
    ShardPlan,
    count_rows,
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
    format_of,
    resolve_files,
    source_from_spec,
    sources_field,
)

__all__ = [
    "REJECT_REASONS", "UNKNOWN_LANG", "Document", "Format", "Reject", "Shard", "ShardBytes", "ShardPlan",
    "SourceConfig", "count_rows", "file_line", "file_line_offsets", "file_reject", "format_of", "iter_documents",
    "output_name_of", "plan_job", "plan_shards", "read_shard", "resolve_files", "shard_bytes_field", "shard_plan",
    "source_from_spec", "sources_field", "validate_row",
]
