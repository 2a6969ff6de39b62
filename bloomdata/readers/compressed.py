"""Decompressed byte streams of input files (plain, ``.gz``, ``.zst``, ``.bz2``, ``.xz``), with truncation reported.

The raw bytes come from ``bloomdata.readers.fs`` (a local file, or any fsspec URL: a remote object is streamed
in blocks and decompressed as it comes).

zstandard's own ``stream_reader`` ends silently when a file stops inside a frame; ``_ZstdRaw`` raises
EOFError there instead, as gzip does, so a truncated file is never mistaken for a short one.

A damaged stream raises one of ``CORRUPT_ERRORS`` where decoding fails (a truncated one, after every byte
before the cut was handed out); readers keep the rows read before it and report the rest of the file as
one ``corrupt_file`` reject. Other OSErrors (a disk or network failure) are not the file's fault and stay
errors. bz2 reports corrupt data as a bare ``OSError``; ``_StreamRaw`` turns it into ``CorruptStream``, so that
the rule holds for every codec.
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zlib
from typing import IO

from bloomdata.readers import fs

CHUNK = 1 << 20  # bytes per read
COMPRESSION = (".gz", ".zst", ".zstd", ".bz2", ".xz")


class CorruptStream(ValueError):
    """Compressed data that cannot be decoded (what bz2 raises as a bare OSError)."""


def strip_compression(name: str) -> str:
    for ext in COMPRESSION:
        if name.endswith(ext):
            return name[: -len(ext)]
    return name


try:
    from zstandard import ZstdError as _ZstdError
except ImportError:  # zstandard is a core dependency; this only keeps the module importable without it
    _ZstdError = OSError  # type: ignore[misc,assignment]


class _ZstdRaw(io.RawIOBase):
    """Decompressed bytes of a .zst file (any number of frames) that, unlike zstandard's stream_reader,
    raises EOFError when the file ends inside a frame instead of silently ending early."""

    def __init__(self, raw: IO[bytes]):
        import zstandard

        self._fh = raw
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._mid_frame = False  # input fed to the current frame and it has not ended
        self._out, self._at = b"", 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._at >= len(self._out):
            data = self._fh.read(CHUNK)
            if not data:
                if self._mid_frame:
                    raise EOFError("compressed file ended before the end of a zstd frame")
                return 0
            parts = []
            while data:
                parts.append(self._obj.decompress(data))
                self._mid_frame = not self._obj.eof
                data = b"" if self._mid_frame else self._obj.unused_data
                if not self._mid_frame:
                    self._obj = self._dctx.decompressobj()
            self._out, self._at = b"".join(parts), 0
        n = min(len(buffer), len(self._out) - self._at)
        buffer[:n] = self._out[self._at:self._at + n]
        self._at += n
        return n

    def close(self) -> None:
        self._fh.close()
        super().close()


class _StreamRaw(io.RawIOBase):
    """A bz2 or xz file as a raw stream: each read hands out what one decompression step gave (``read1``), so the
    rows before a truncation are read before its EOFError (a plain read fills its whole buffer first, losing them);
    bz2's corrupt data (a bare ``OSError``) becomes ``CorruptStream``."""

    def __init__(self, file: bz2.BZ2File | lzma.LZMAFile):
        self._file = file

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            data = self._file.read1(len(buffer))
        except OSError as exc:
            if type(exc) is OSError and exc.errno is None:  # bz2's "Invalid data stream"
                raise CorruptStream(str(exc)) from None
            raise
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._file.close()
        super().close()


def decompressed(raw: IO[bytes], name: str) -> IO[bytes]:
    """A buffered binary stream of ``raw``'s bytes decompressed as ``name``'s suffix says (plain: ``raw``)."""
    name = name.lower()
    if name.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]  # a GzipFile is a binary IO
    if name.endswith((".zst", ".zstd")):
        return io.BufferedReader(_ZstdRaw(raw), CHUNK)
    if name.endswith(".bz2"):
        return io.BufferedReader(_StreamRaw(bz2.BZ2File(raw)), CHUNK)
    if name.endswith(".xz"):
        return io.BufferedReader(_StreamRaw(lzma.LZMAFile(raw)), CHUNK)
    return raw


def open_bytes(path: str) -> IO[bytes]:
    """A buffered binary stream of the file's (decompressed) bytes, local or remote (``fs.open_input``)."""
    return decompressed(fs.open_input(path), path)


# What reading a damaged compressed stream raises: a truncated gzip, zstd, bz2 or xz stream, EOFError; a bad gzip
# header or checksum, BadGzipFile; corrupt deflate data, zlib.error; corrupt zstd data, ZstdError; corrupt bz2
# data, CorruptStream (``_StreamRaw``); corrupt xz data, LZMAError.
CORRUPT_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error, _ZstdError, CorruptStream, lzma.LZMAError)


def corrupt_detail(exc: BaseException) -> str:
    """The ``detail`` of a ``corrupt_file`` reject: what failed, and what it cost."""
    return f"cannot decompress ({exc}): the file is truncated or corrupt; nothing after this point was read"
