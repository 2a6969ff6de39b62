"""A user's input format: lines of ``LANG|TEXT`` (pipe-separated), one document each (docs/extending.md)."""

from __future__ import annotations

from collections.abc import Iterator

from bloomdata.readers.base import Reader
from bloomdata.readers.compressed import open_bytes
from bloomdata.readers.records import Document, Reject, Shard, validate_row


class PsvReader(Reader):
    name = "psv"
    suffixes = (".psv",)

    def read(self, shard: Shard) -> Iterator[Document | Reject]:
        """Rows [shard.start, shard.stop) of the file; a line without ``|`` is a ``missing_text`` reject."""
        with open_bytes(shard.path) as fh:
            for row, raw in enumerate(fh):
                if row < shard.start:
                    continue
                if shard.stop is not None and row >= shard.stop:
                    return
                line = row + 1
                try:
                    lang, sep, text = raw.decode("utf-8").rstrip("\r\n").partition("|")
                except UnicodeDecodeError as exc:
                    yield Reject("invalid_utf8", shard.path, line, str(exc))
                    continue
                if not sep:
                    yield Reject("missing_text", shard.path, line, "no '|' on the line")
                    continue
                yield validate_row(text, lang, shard, line)
