"""``Reader``: what one input format is, in one class (its file names, how it is measured, counted, cut and read).

The planner (``bloomdata.readers.shards``) knows no format: for each file it asks the file's reader

- ``measure(shard)``: (bytes, units): the size a shard plan cuts by, and for a format made of row groups
  or record batches their (rows, text bytes), read from metadata only; units None: the file is cut by bytes or
  not at all;
- ``byte_ranges(shard, size, target)``: about equal [lo, hi) ranges of a file of ``size`` bytes, or None when the
  file cannot be cut without reading it (a compressed stream, a JSON array, CSV's quoted newlines);
- ``count_rows(shard, every)``: (rows, the byte offset of every ``every``-th row or None): what a row-range plan
  (``max_rows_per_shard``) needs;
- ``read(shard)``: the shard's rows, one ``Document`` or ``Reject`` each, in file order.

Each is given a ``Shard``: the whole file (what it is measured, counted and cut as, with the source's fields),
or for ``read`` the piece the planner cut.

A user's format is a subclass named ``package.module:ClassName`` as a source's ``format``
(``bloomdata.plugins``): it gets the same planning, sharding, markers, Dask placement and rejects as ours. The
built-in formats are listed once, in ``bloomdata.readers.registry.BUILTINS``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import ClassVar

from bloomdata.readers import fs
from bloomdata.readers.records import Document, Reject, Shard

Units = list[tuple[int, int]]  # (rows, bytes) per row group / record batch, in file order


class Reader(ABC):
    """One input format. Subclasses set ``name`` and ``suffixes`` and implement ``read``; the other methods have
    defaults for a format read as one stream that is never cut (whole-file shards; rows counted by reading)."""

    name: ClassVar[str]  # the format's name in configs (``format: jsonl``) and in shard identities
    suffixes: ClassVar[tuple[str, ...]] = ()  # lower-case endings of its file names, before a compression suffix
    compressible: ClassVar[bool] = True  # whether NAME.gz/.zst/.bz2/.xz are read too (as streams: never cut)
    one_document: ClassVar[bool] = False  # a whole file is one document (row 1): never cut, never counted

    def claims(self, head: bytes) -> bool:
        """Whether a file whose first bytes are ``head`` (decompressed, leading whitespace and byte-order mark
        stripped) is of this format: asked only when several readers share a suffix (``.json``)."""
        return True

    def measure(self, shard: Shard) -> tuple[int, Units | None]:
        """(bytes a shard plan cuts by, units or None): by default the file's size."""
        return fs.input_bytes(shard.path), None

    def byte_ranges(self, shard: Shard, size: int, target: int) -> list[tuple[int, int]] | None:
        """About equal [lo, hi) byte ranges of at most about ``target`` bytes; None: this file cannot be cut."""
        return None

    def count_rows(self, shard: Shard, every: int) -> tuple[int, list[int] | None]:
        """(rows as ``read`` sees them, byte offsets of rows every, 2*every, ... for seeking, or None); by default
        the rows read (a one-document format: 1)."""
        if self.one_document:
            return 1, None
        return sum(1 for _ in self.read(shard)), None

    @abstractmethod
    def read(self, shard: Shard) -> Iterator[Document | Reject]:
        """Rows [start, stop) of the file (or the rows of its byte range), one Document or Reject each."""
