"""What a reader yields: ``Document`` or ``Reject`` per row, and the ``Shard`` it reads.

Every row of a shard yields exactly one item, so builds can count rejects by reason and point at
file:line; the one exception is a damaged compressed file, whose unreadable rest (rows that cannot be
counted) is a single ``corrupt_file`` reject. ``validate_row`` is the one check of a row's text value,
shared by every format.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bloomdata.durable import content_key
from bloomdata.errors import BloomstackError

# Why a row was skipped. Keys are stable: they appear in build summaries and rejects files.
REJECT_REASONS = (
    "malformed_json",  # the line is not a JSON object
    "invalid_utf8",  # the bytes are not valid UTF-8
    "missing_text",  # the text field is absent (or null)
    "non_string_text",  # the text field is not a string
    "empty_text",  # the text is empty (no tokens would be written)
    # a truncated or corrupt .gz/.zst/.bz2/.xz, or CSV that cannot be parsed: the rest of the file from this line,
    # counted once
    "corrupt_file",
)


UNKNOWN_LANG = "und"  # ISO 639-2 "undetermined": documents without a language


def output_name_of(lang: str | None) -> str:
    """The filesystem-safe name of a document language's output (dataset, cleaned directory, row)."""
    if not lang:
        return UNKNOWN_LANG
    return re.sub(r"[^A-Za-z0-9_.-]", "_", lang)[:64]


@dataclass(frozen=True)
class Shard:
    """A unit of work: rows [start, stop) of one file (stop=None: to the end), or a byte range of one.

    ``format`` is always concrete after ``plan_shards``: a built-in reader's name (jsonl, json, csv, tsv, parquet,
    arrow, txt: ``bloomdata.readers.registry``) or a user's ``package.module:ClassName``. ``offset`` is the
    byte offset of row ``start`` in an uncompressed jsonl file, recorded by the planner so the reader can
    seek; None means "skip ``start`` rows by reading".

    ``byte_range=(lo, hi)`` (a format that cuts by bytes: uncompressed jsonl): the shard owns every line that
    *starts* at a byte offset in [lo, hi). Such a shard cannot know how many lines precede it, so its rows'
    ``line`` numbers count from its own first line (``local_lines``); the build turns them into file line
    numbers from the line counts of the shards before it, in plan order.
    """

    path: str
    format: str
    text_field: str
    lang: str | None
    lang_field: str
    start: int = 0
    stop: int | None = None
    offset: int | None = None
    byte_range: tuple[int, int] | None = None

    @property
    def local_lines(self) -> bool:
        """Whether the rows' line numbers count from this shard's first line instead of the file's."""
        return self.byte_range is not None

    @property
    def name(self) -> str:
        """Stable identifier used for shard outputs and completion markers (filesystem-safe).

        ``<file name>-<start>-<stop|end>-<hash>`` (``<file name>-b<lo>-<hi>-<hash>`` for a byte range):
        readable, and the hash of every field that changes what the shard yields keeps two shards of the
        same file name (or read two ways) apart.
        """
        digest = content_key([self.path, self.format, self.text_field, self.lang, self.lang_field,
                              self.start, self.stop, self.byte_range], length=10)
        base = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(self.path.rstrip("/")))[:60]
        if self.byte_range is not None:
            return f"{base}-b{self.byte_range[0]}-{self.byte_range[1]}-{digest}"
        return f"{base}-{self.start}-{'end' if self.stop is None else self.stop}-{digest}"


@dataclass(frozen=True)
class Document:
    text: str
    lang: str | None
    path: str
    line: int  # 1-based row/line number in the file (the shard, for a byte-range shard; 1 for txt)


@dataclass(frozen=True)
class Reject:
    reason: str  # one of REJECT_REASONS
    path: str
    line: int
    detail: str = ""



def field_value(row: dict[str, Any], name: str) -> Any:
    """``row[name]``, or for a dotted name absent as such (``meta.content``) the value at that path of nested
    objects; None when missing."""
    value = row.get(name)
    if value is None and "." in name and name not in row:
        value = row
        for key in name.split("."):
            value = value.get(key) if isinstance(value, dict) else None
    return value


def validate_row(text: object, lang: object, shard: Shard, line: int) -> Document | Reject:
    """Validate one row's text value (shared by every format)."""
    if text is None:
        return Reject("missing_text", shard.path, line, f"no {shard.text_field!r} field")
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as exc:
            return Reject("invalid_utf8", shard.path, line, str(exc))
    if not isinstance(text, str):
        return Reject("non_string_text", shard.path, line, f"{shard.text_field!r} is {type(text).__name__}")
    if not text:
        return Reject("empty_text", shard.path, line, "")
    try:
        text.encode("utf-8")  # JSON escapes can smuggle in lone surrogates that no tokenizer accepts
    except UnicodeEncodeError as exc:
        return Reject("invalid_utf8", shard.path, line, str(exc))
    lang = shard.lang if shard.lang is not None else (lang if isinstance(lang, str) else None)
    return Document(text, lang, shard.path, line)


# What to check first when every row of the inputs was rejected for this reason.
_EMPTY_HINTS = {
    "missing_text": "check sources.text_field (a dotted path reads nested fields: meta.content)",
    "non_string_text": "check sources.text_field: it names a field that is not text",
    "malformed_json": "check sources.format (a .json file holding one JSON array is read as one when it starts "
                      "with '[')",
    "invalid_utf8": "the files are not UTF-8: convert them",
    "empty_text": "every text is empty: check sources.text_field",
    "corrupt_file": "the files are truncated or corrupt: fetch them again",
}


def no_documents_error(paths: list[str], rejects: Mapping[str, int], detail: str = "",
                       allow: str = "allow_empty") -> BloomstackError:
    """The one line of a run whose inputs yielded no document: the files, the top reject reason and what to check.
    ``rejects``: rows per reason (none: the files hold no rows); ``detail``: an example of the top reason;
    ``allow``: the config key that says an empty output is expected ("": none). Names config keys (a CLI shows
    them as its flags)."""
    unique = list(dict.fromkeys(paths))
    files = ", ".join(unique[:3]) + (f" and {len(unique) - 3} more" if len(unique) > 3 else "")
    total = sum(rejects.values())
    if total:
        reason, count = max(rejects.items(), key=lambda item: (item[1], item[0]))
        why = f"all {total:,} rows were rejected, most as {reason} ({count:,}{': ' + detail if detail else ''}); " \
              f"{_EMPTY_HINTS.get(reason, 'see the rejects')}"
    else:
        why = "the files hold no rows"
    then = f"; set {allow} if an empty output is expected" if allow else ""
    keys = ["sources.text_field", "sources.format", *([allow] if allow else [])]
    return BloomstackError(f"no documents in {files}: {why}{then}", keys=keys)
