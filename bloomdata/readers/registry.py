"""The one list of built-in formats, and how a file or a config's ``format`` finds its ``Reader``.

``BUILTINS`` is the only place a format is registered: a new one is a ``Reader`` subclass added here (or, without
editing ours, a user's class named ``package.module:ClassName`` as a source's ``format``, loaded by
``bloomdata.plugins``). ``format_of`` picks a file's format by its name (a compression suffix is looked through);
when several readers share a suffix (``.json``: a JSON array or JSON Lines), the file's first bytes decide
(``Reader.claims``), in ``BUILTINS`` order.
"""

from __future__ import annotations

import functools

from bloomdata.plugins import check_target, resolve
from bloomdata.readers.base import Reader
from bloomdata.readers.columnar import ArrowReader, ParquetReader
from bloomdata.readers.compressed import CORRUPT_ERRORS, open_bytes, strip_compression
from bloomdata.readers.delimited import CsvReader, TsvReader
from bloomdata.readers.json_array import JsonArrayReader
from bloomdata.readers.jsonl import BOM, JsonlReader
from bloomdata.readers.txt import TxtReader

# Order matters only between readers sharing a suffix: the first whose ``claims`` accepts the file's head wins.
BUILTINS: tuple[type[Reader], ...] = (JsonArrayReader, JsonlReader, CsvReader, TsvReader, ParquetReader,
                                      ArrowReader, TxtReader)
BY_NAME: dict[str, type[Reader]] = {cls.name: cls for cls in BUILTINS}
HEAD_BYTES = 64  # what ``claims`` is shown of a file


@functools.lru_cache(maxsize=64)
def reader_for(fmt: str) -> Reader:
    """The reader of a concrete format: a built-in name or ``package.module:ClassName`` (imported once per
    process, on every Dask worker that reads a shard of it)."""
    return resolve(fmt, BY_NAME, Reader, "format", "bloomdata.readers.base.Reader")()  # type: ignore[type-abstract]


def suffix_list() -> str:
    """The file names the built-in readers take, for messages."""
    names = [s for cls in BUILTINS for s in cls.suffixes]
    return ", ".join(dict.fromkeys(names)) + " (compressed: .gz .zst .bz2 .xz), save_to_disk dirs"


def _head(path: str) -> bytes:
    """The first bytes of the (decompressed) file, without a byte-order mark and leading whitespace."""
    try:
        with open_bytes(path) as fh:
            head = fh.read(HEAD_BYTES)
            while head.strip() == b"" and (more := fh.read(HEAD_BYTES)):
                head = more
    except CORRUPT_ERRORS:
        return b""
    return head.removeprefix(BOM).lstrip()


def candidates(name: str, among: tuple[type[Reader], ...] = BUILTINS) -> list[type[Reader]]:
    """The readers whose suffixes match a file name (lower-case; a compression suffix looked through)."""
    name = name.lower()
    plain = strip_compression(name)
    compressed = plain != name
    return [cls for cls in among if plain.endswith(cls.suffixes) and (cls.compressible or not compressed)]


def format_of(path: str) -> str | None:
    """The concrete built-in format of a file by its name, or None when no reader takes that name; reads the
    file's first bytes only when readers share its suffix."""
    found = candidates(path.rsplit("/", 1)[-1])
    if len(found) > 1:
        head = _head(path)
        found = [cls for cls in found if cls().claims(head)] or found[-1:]
    return found[0].name if found else None


def check_format(fmt: str) -> str:
    """A config's ``format``: auto, hf, a built-in name or ``package.module:ClassName`` (a ValueError otherwise,
    for pydantic)."""
    if ":" in fmt:
        return check_target(fmt)
    if fmt in ("auto", "hf") or fmt in BY_NAME:
        return fmt
    raise ValueError(f"unknown format {fmt!r}: choose auto, hf, {', '.join(BY_NAME)} or name your own reader "
                     "class as package.module:ClassName")


def takes(fmt: str, name: str) -> bool:
    """Whether a source whose ``format`` is ``fmt`` (not auto) reads a file called ``name`` found in a directory."""
    cls = BY_NAME[fmt] if fmt in BY_NAME else type(reader_for(fmt))
    return bool(candidates(name, (cls,)))
