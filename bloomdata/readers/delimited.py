"""CSV and TSV readers (``CsvReader``, ``TsvReader``): a header row names the columns, the text is the column
named by the source's ``text_field`` (and the language, without ``lang``, the ``lang_field`` column when there is
one); a row is a record.

Parsed with Python's ``csv`` module (RFC 4180 quoting: a quoted field may hold the delimiter and newlines), which
is what HF ``datasets``' csv loader reads through pandas for these files. A record's ``line`` is its number
(1-based, the header not counted: HF's row index + 1), as a table row's is; blank lines are not records. A
record too short to hold the text column is ``missing_text``; an empty field is ``empty_text``. Bytes that are
not UTF-8 reach the text as lone surrogates, which ``validate_row`` rejects as ``invalid_utf8``.

A quoted field may hold newlines, so a line start is not a record start: a large file is not cut by bytes (one
shard, listed among the inputs the plan could not cut), and a row range skips the records before it by parsing.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Iterator
from typing import ClassVar

from bloomdata.errors import BloomstackError
from bloomdata.readers.base import Reader
from bloomdata.readers.compressed import CORRUPT_ERRORS, corrupt_detail, open_bytes
from bloomdata.readers.records import Document, Reject, Shard, validate_row

# A document is one field: csv's default limit (131,072 characters) would fail on long ones.
csv.field_size_limit(max(csv.field_size_limit(), min(sys.maxsize, 2**31 - 1)))


class CsvReader(Reader):
    """Comma-separated values with a header row."""

    name = "csv"
    suffixes = (".csv",)
    delimiter: ClassVar[str] = ","

    def _columns(self, header: list[str], shard: Shard) -> tuple[int, int | None]:
        if shard.text_field not in header:
            raise BloomstackError(f"{shard.path}: no column {shard.text_field!r} in the header (columns: {header}); "
                                  "set the source's text_field")
        lang = header.index(shard.lang_field) if shard.lang is None and shard.lang_field in header else None
        return header.index(shard.text_field), lang

    def read(self, shard: Shard) -> Iterator[Document | Reject]:
        row = 0  # records read
        try:
            with open_bytes(shard.path) as raw:
                text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")
                records = csv.reader(text, delimiter=self.delimiter)
                header = next(records, None)
                if header is None:
                    return
                text_at, lang_at = self._columns(header, shard)
                for record in records:
                    if not record:
                        continue
                    row += 1
                    if row <= shard.start:
                        continue
                    if shard.stop is not None and row > shard.stop:
                        return
                    value = record[text_at] if text_at < len(record) else None
                    lang = record[lang_at] if lang_at is not None and lang_at < len(record) else None
                    yield validate_row(value, lang, shard, row)
        except csv.Error as exc:
            if _owns(shard, row + 1):
                yield Reject("corrupt_file", shard.path, row + 1, f"not valid {self.name.upper()} ({exc}); "
                                                                   "nothing after this record was read")
        except CORRUPT_ERRORS as exc:
            if _owns(shard, row + 1):
                yield Reject("corrupt_file", shard.path, row + 1, corrupt_detail(exc))
        except OSError as exc:
            raise BloomstackError(f"{shard.path}: record {row + 1}: cannot read ({exc.strerror or exc})") from None


def _owns(shard: Shard, row: int) -> bool:
    """Whether record ``row`` (1-based) is in the shard's range (the damage's reject goes to one shard only)."""
    return shard.start < row and (shard.stop is None or row <= shard.stop)


class TsvReader(CsvReader):
    """Tab-separated values with a header row (quoted fields as in CSV)."""

    name = "tsv"
    suffixes = (".tsv",)
    delimiter = "\t"
