"""JSON array reader (``JsonArrayReader``): a ``.json`` file holding one top-level array of objects, what Hugging
Face ``datasets``' json loader and many exports write; a row is an element (``line`` = its 1-based index).

Streamed with bounded memory: the text is decoded and parsed one element at a time (``json.JSONDecoder.raw_decode``
on a buffer that grows only while an element is incomplete), never the whole file. A ``.json`` file is this
format when its first byte (after a byte-order mark and whitespace) is ``[``; otherwise it is JSON Lines
(``bloomdata.readers.jsonl``). An array cannot be cut without parsing it from its start, so a large one is one
shard (listed among the inputs the plan could not cut) and a row range skips the elements before it by parsing.

Bytes that are not UTF-8 reach the text as lone surrogates, which ``validate_row`` rejects as ``invalid_utf8``
row by row. Broken JSON ends the array there: one ``malformed_json`` reject for the rest of the file (its
elements cannot be found without the structure), after every element read before it.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from typing import IO

from bloomdata.errors import BloomstackError
from bloomdata.readers.base import Reader
from bloomdata.readers.compressed import CHUNK, CORRUPT_ERRORS, corrupt_detail, open_bytes
from bloomdata.readers.records import Document, Reject, Shard, field_value, validate_row

WHITESPACE = " \t\r\n"
_DECODER = json.JSONDecoder()


class _Malformed(ValueError):
    """The array's structure is broken at this point."""


class _Elements:
    """The elements of a top-level JSON array, parsed one at a time from a binary stream."""

    def __init__(self, fh: IO[bytes]) -> None:
        self.fh = fh
        self.text = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.buf, self.pos, self.eof = "", 0, False

    def _more(self) -> bool:
        """Append the next chunk; False at the end of the file."""
        if self.eof:
            return False
        data = self.fh.read(CHUNK)
        self.eof = not data
        if self.pos > len(self.buf) // 2:  # drop what is parsed so that the buffer stays about one chunk
            self.buf, self.pos = self.buf[self.pos:], 0
        self.buf += self.text.decode(data, final=self.eof)
        return bool(data)

    def _next_char(self) -> str:
        """The next non-whitespace character (not consumed), "" at the end of the file."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in WHITESPACE:
                self.pos += 1
            if self.pos < len(self.buf) or not self._more():
                return self.buf[self.pos:self.pos + 1]

    def __iter__(self) -> Iterator[object]:
        if self._next_char() == "\ufeff":
            self.pos += 1
        if self._next_char() != "[":
            raise _Malformed("the file does not start with '['")
        self.pos += 1
        first = True
        while True:
            char = self._next_char()
            if char == "]":
                return
            if not first:
                if char != ",":
                    raise _Malformed(f"expected ',' or ']' between elements, found {char or 'the end of the file'!r}")
                self.pos += 1
            first = False
            yield self._element()

    def _element(self) -> object:
        self._next_char()
        while True:
            try:
                value, end = _DECODER.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self._more():
                    continue
                raise _Malformed(str(exc)) from None
            if end == len(self.buf) and self._more():  # a number or literal may go on in the next chunk
                continue
            self.pos = end
            return value


def _owns(shard: Shard, row: int) -> bool:
    """Whether row ``row`` (1-based) is in the shard's range (the damage's reject goes to one shard only)."""
    return shard.start < row and (shard.stop is None or row <= shard.stop)


def read_json_array(shard: Shard) -> Iterator[Document | Reject]:
    """Elements [start, stop) of the array, one Document or Reject each."""
    index = 0
    try:
        with open_bytes(shard.path) as fh:
            for value in _Elements(fh):
                index += 1
                if index <= shard.start:
                    continue
                if shard.stop is not None and index > shard.stop:
                    return
                if not isinstance(value, dict):
                    yield Reject("malformed_json", shard.path, index, f"expected an object, got {type(value).__name__}")
                    continue
                yield validate_row(field_value(value, shard.text_field), field_value(value, shard.lang_field),
                                   shard, index)
    except _Malformed as exc:
        if _owns(shard, index + 1):
            yield Reject("malformed_json", shard.path, index + 1, f"{exc}; nothing after this element was read")
    except CORRUPT_ERRORS as exc:
        if _owns(shard, index + 1):
            yield Reject("corrupt_file", shard.path, index + 1, corrupt_detail(exc))
    except OSError as exc:
        raise BloomstackError(f"{shard.path}: element {index + 1}: cannot read ({exc.strerror or exc})") from None


class JsonArrayReader(Reader):
    """A top-level JSON array in a ``.json`` file (told from JSON Lines by its first byte, ``[``)."""

    name = "json"
    suffixes = (".json",)

    def claims(self, head: bytes) -> bool:
        return head.startswith(b"[")

    def read(self, shard: Shard) -> Iterator[Document | Reject]:
        return read_json_array(shard)
