"""Plain-text reader (``TxtReader``): the whole file (plain or compressed) is one document, row 1.

A leading UTF-8 byte-order mark is dropped (``utf-8-sig``): it marks the encoding, it is not text.
"""

from __future__ import annotations

from collections.abc import Iterator

from bloomdata.errors import BloomstackError
from bloomdata.readers.base import Reader
from bloomdata.readers.compressed import CORRUPT_ERRORS, corrupt_detail, open_bytes
from bloomdata.readers.records import Document, Reject, Shard, validate_row


def read_txt(shard: Shard) -> Iterator[Document | Reject]:
    if shard.start > 0 or shard.stop == 0:
        return
    try:
        with open_bytes(shard.path) as fh:
            raw = fh.read()  # one document: memory is bounded by the size of that document
    except CORRUPT_ERRORS as exc:  # a damaged .gz/.zst: the one document is lost
        yield Reject("corrupt_file", shard.path, 1, corrupt_detail(exc))
        return
    except OSError as exc:
        raise BloomstackError(f"cannot read input {shard.path}: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        yield Reject("invalid_utf8", shard.path, 1, str(exc))
        return
    yield validate_row(text, None, shard, 1)


class TxtReader(Reader):
    """A text file is one document: never cut, never counted."""

    name = "txt"
    suffixes = (".txt",)
    one_document = True

    def read(self, shard: Shard) -> Iterator[Document | Reject]:
        return read_txt(shard)
