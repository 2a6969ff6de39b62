"""Streaming readers: every supported corpus format becomes an iterator of ``Document`` or ``Reject``.

CONTRACT (shared by the tokenizer trainer and the parallel build; owned by the readers' author):

- ``SourceConfig``: where one source's files are and how to read them (pydantic; shared by CLI and flows).
- ``plan_shards(sources, max_rows_per_shard) -> list[Shard]``: a deterministic list of work units: one per
  file, or a row range of a large file. Same inputs -> same list, in the same order (sorted paths).
- ``read_shard(shard) -> Iterator[Document | Reject]``: streams one shard with bounded memory, in file order.
  Every row of the shard yields exactly one item: a ``Document`` to tokenize or a ``Reject`` with a reason
  from ``REJECT_REASONS`` and its file:line, so builds can count rejects by reason and write examples.
- ``iter_documents(sources) -> Iterator[Document]``: all documents of all sources (rejects dropped).

This file currently holds the contract only; the implementations land with issue 2.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

Format = Literal["auto", "jsonl", "parquet", "arrow", "hf", "txt"]

# Why a row was skipped. Keys are stable: they appear in build summaries and rejects files.
REJECT_REASONS = (
    "malformed_json",  # the line is not a JSON object
    "invalid_utf8",  # the bytes are not valid UTF-8
    "missing_text",  # the text field is absent (or null)
    "non_string_text",  # the text field is not a string
    "empty_text",  # the text is empty (no tokens would be written)
)


class SourceConfig(BaseModel):
    """One input source: files of one format, one language (from config or from a per-row field)."""

    paths: list[str] = Field(description="files, directories or glob patterns")
    format: Format = "auto"
    text_field: str = "text"
    lang: str | None = Field(default=None, description="language of every document; else read lang_field")
    lang_field: str = "lang"


@dataclass(frozen=True)
class Shard:
    """A unit of work: rows [start, stop) of one file (stop=None: to the end)."""

    path: str
    format: Format
    text_field: str
    lang: str | None
    lang_field: str
    start: int = 0
    stop: int | None = None

    @property
    def name(self) -> str:
        """Stable identifier used for shard outputs and completion markers."""
        raise NotImplementedError


@dataclass(frozen=True)
class Document:
    text: str
    lang: str | None
    path: str
    line: int  # 1-based row/line number in the file (the document index for txt, parquet, arrow, hf)


@dataclass(frozen=True)
class Reject:
    reason: str  # one of REJECT_REASONS
    path: str
    line: int
    detail: str = ""


def plan_shards(sources: list[SourceConfig], max_rows_per_shard: int | None = None) -> list[Shard]:
    raise NotImplementedError


def read_shard(shard: Shard) -> Iterator[Document | Reject]:
    raise NotImplementedError


def iter_documents(sources: list[SourceConfig]) -> Iterator[Document]:
    raise NotImplementedError
