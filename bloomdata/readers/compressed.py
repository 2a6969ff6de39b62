"""Decompressed byte streams of input files (plain, ``.gz``, ``.zst``), with truncation reported.

zstandard's own ``stream_reader`` ends silently when a file stops inside a frame; ``_ZstdRaw`` raises
EOFError there instead, as gzip does, so a truncated file is never mistaken for a short one.

A damaged stream raises one of ``CORRUPT_ERRORS`` where decoding fails (a truncated one, after every byte
before the cut was handed out); readers keep the rows read before it and report the rest of the file as
one ``corrupt_file`` reject. Other OSErrors (a disk or network failure) are not the file's fault and stay
errors.
"""

from __future__ import annotations

import gzip
import io
import zlib
from typing import IO

from bloomdata.errors import BloomstackError

CHUNK = 1 << 20  # bytes per read
COMPRESSION = (".gz", ".zst", ".zstd")


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

    def __init__(self, path: str):
        import zstandard

        self._fh = open(path, "rb")
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


def open_bytes(path: str) -> IO[bytes]:
    """A buffered binary stream of the file's (decompressed) bytes."""
    try:
        if path.endswith(".gz"):
            return gzip.open(path, "rb")  # type: ignore[return-value]  # a GzipFile is a binary IO
        if path.endswith((".zst", ".zstd")):
            return io.BufferedReader(_ZstdRaw(path), CHUNK)
        return open(path, "rb", buffering=CHUNK)
    except OSError as exc:
        raise BloomstackError(f"cannot read input {path}: {exc.strerror or exc}") from None


# What reading a damaged compressed stream raises: a truncated gzip or zstd stream, EOFError; a bad gzip
# header or checksum, BadGzipFile; corrupt deflate data, zlib.error; corrupt zstd data, ZstdError.
CORRUPT_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error, _ZstdError)


def corrupt_detail(exc: BaseException) -> str:
    """The ``detail`` of a ``corrupt_file`` reject: what failed, and what it cost."""
    return f"cannot decompress ({exc}): the file is truncated or corrupt; nothing after this point was read"
