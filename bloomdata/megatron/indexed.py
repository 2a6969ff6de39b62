"""Megatron's memory-mapped indexed dataset (``MMIDIDX`` version 1): reader, writer and merge in one place.

A dataset is a pair of files sharing a prefix. ``PREFIX.bin`` is the raw concatenation of every sequence's
tokens in one dtype, with no header. ``PREFIX.idx`` describes it; all integers little-endian, no padding:

    offset        size   type        field
    0             9      bytes       magic b"MMIDIDX\\x00\\x00"
    9             8      u64         version = 1
    17            1      u8          dtype code (DTYPE_CODES below; 4 = int32, 8 = uint16 for token data)
    18            8      u64         S = number of sequences
    26            8      u64         D = length of the document index, counting its leading 0
    34            4*S    int32[S]    sizes: tokens in sequence i
    34+4S         8*S    int64[S]    pointers: byte offset of sequence i in .bin (exclusive prefix sum of
                                     sizes * itemsize)
    34+12S        8*D    int64[D]    document index: first sequence of document d; [0] = 0, [D-1] = S
   (34+12S+8D     S      int8[S]     sequence modes, multimodal files of megatron-core only; ignored here)

This is byte-identical to what megatron-core 0.16 (``megatron/core/datasets/indexed_dataset.py``) and the
BigScience Megatron-DeepSpeed fork that trained BLOOM write (docs/megatron-data.md, "The .bin/.idx
format"). We write one sequence per document, so S = D - 1 in our files; files from other tools with
several sequences per document read fine.

Design notes:
- The reader validates the header and the file sizes before mapping anything, so a truncated or corrupt
  file raises ``BloomstackError`` naming it instead of crashing the interpreter or returning garbage.
- A remote prefix (any fsspec URL: ``s3://bucket/data/en``, ``https://...``; ``bloomdata.readers.fs``) is read
  without a local copy: its .idx whole in one request, its .bin by byte range, one ranged request per ``get``.
- The writer keeps sizes in typed arrays (4 B + 8 B per document, not Python ints: Megatron's list-based
  builders OOM at tens of millions of documents) and computes pointers with a vectorised scan at the end.
- Writes are atomic (``bloomdata.durable``): data goes to ``*.tmp-<pid>-<random>`` files which are fsynced
  and published together, ``.idx`` last (its old version removed first). An ``.idx`` next to a ``.bin``
  therefore always describes a complete dataset.
"""

from __future__ import annotations

import os
import shutil
import struct
from array import array
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import overload

import numpy as np

from bloomdata import durable
from bloomdata.errors import BloomstackError
from bloomdata.readers import fs

INDEX_MAGIC = b"MMIDIDX\x00\x00"
INDEX_VERSION = 1
HEADER_SIZE = 34  # 9 magic + 8 version + 1 dtype code + 8 S + 8 D

# megatron-core's DType codes (codes 6 and 7 differ in the BigScience fork; they never hold tokens).
DTYPE_CODES: dict[int, type[np.number]] = {
    1: np.uint8,
    2: np.int8,
    3: np.int16,
    4: np.int32,
    5: np.int64,
    6: np.float64,
    7: np.float32,
    8: np.uint16,
}
CODE_OF_DTYPE = {np.dtype(v): k for k, v in DTYPE_CODES.items()}


def data_file_path(prefix: str | os.PathLike) -> str:
    return f"{os.fspath(prefix)}.bin"


def index_file_path(prefix: str | os.PathLike) -> str:
    return f"{os.fspath(prefix)}.idx"


def best_fitting_dtype(vocab_size: int) -> np.dtype:
    """Megatron's rule: uint16 when the vocabulary has fewer than 65,500 tokens, else int32."""
    return np.dtype(np.uint16) if vocab_size < 65500 else np.dtype(np.int32)


def dataset_exists(prefix: str | os.PathLike) -> bool:
    return os.path.isfile(index_file_path(prefix)) and os.path.isfile(data_file_path(prefix))


def _read_header(path: str) -> bytes:
    """The first HEADER_SIZE bytes of a local .idx (fewer when it is shorter)."""
    try:
        with open(path, "rb") as f:
            return f.read(HEADER_SIZE)
    except FileNotFoundError:
        raise BloomstackError(f"{path}: index file not found (expected PREFIX.idx next to PREFIX.bin)") from None
    except OSError as exc:
        raise BloomstackError(f"{path}: cannot read index file ({exc.strerror})") from None


def _parse_header(path: str, header: bytes) -> tuple[np.dtype, int, int]:
    """(dtype, S, D) from an .idx header, validated."""
    if len(header) < HEADER_SIZE or header[:9] != INDEX_MAGIC:
        raise BloomstackError(
            f"{path}: not a Megatron MMIDIDX index (bad magic or shorter than the {HEADER_SIZE}-byte header); "
            "rebuild it with `bloomdata build`"
        )
    (version,) = struct.unpack("<Q", header[9:17])
    if version != INDEX_VERSION:
        raise BloomstackError(f"{path}: index version {version}, only version {INDEX_VERSION} is supported")
    code = header[17]
    if code not in DTYPE_CODES:
        raise BloomstackError(f"{path}: unknown dtype code {code} in the index header (file is corrupt)")
    seq_count, doc_count = struct.unpack("<QQ", header[18:34])
    return np.dtype(DTYPE_CODES[code]), seq_count, doc_count


def _index_buffer(idx_path: str) -> tuple[bytes, np.ndarray | bytes, int]:
    """(header, buffer of the whole index, its size in bytes): a local .idx memory-mapped, a remote one (any fsspec
    URL) read whole in one request (12 B per sequence, 8 B per document)."""
    if fs.is_remote(idx_path):
        index = fs.read_bytes(idx_path)
        return index[:HEADER_SIZE], index, len(index)
    header = _read_header(idx_path)
    size = os.path.getsize(idx_path)
    return header, (np.memmap(idx_path, mode="r", dtype=np.uint8) if size else b""), size


class IndexedDataset:
    """Read-only view of ``PREFIX.bin/.idx``; memory-mapped, nothing copied.

    ``len(ds)`` is the number of sequences; ``ds[i]`` is sequence i as a numpy array (a view into the
    mapping); ``ds.get(i, offset, length)`` a window of it. ``sizes``, ``pointers`` and
    ``document_indices`` are numpy views of the index.
    """

    def __init__(self, prefix: str | os.PathLike):
        self.prefix = os.fspath(prefix)
        self._open()

    def _open(self) -> None:
        idx_path, bin_path = index_file_path(self.prefix), data_file_path(self.prefix)
        header, buf, idx_size = _index_buffer(idx_path)
        dtype, seq_count, doc_count = _parse_header(idx_path, header)
        expected = HEADER_SIZE + 12 * seq_count + 8 * doc_count
        # megatron-core multimodal files carry S trailing mode bytes, which we ignore.
        if idx_size not in (expected, expected + seq_count):
            raise BloomstackError(
                f"{idx_path}: index is {idx_size} bytes but its header promises {expected} "
                f"({seq_count} sequences, {doc_count} document entries): the file is truncated or corrupt; "
                "rebuild it"
            )
        if not fs.isfile(bin_path):
            raise BloomstackError(f"{bin_path}: data file not found next to {idx_path}")
        self.dtype = dtype
        self._index_mmap = buf  # kept: the arrays below are views of it
        s, d = seq_count, doc_count
        self.sizes = np.frombuffer(buf, dtype="<i4", count=s, offset=HEADER_SIZE)
        self.pointers = np.frombuffer(buf, dtype="<i8", count=s, offset=HEADER_SIZE + 4 * s)
        self.document_indices = np.frombuffer(buf, dtype="<i8", count=d, offset=HEADER_SIZE + 12 * s)
        self.idx_bytes, self.bin_bytes = idx_size, fs.input_bytes(bin_path)
        self._validate(idx_path, bin_path)
        # a remote .bin is read by byte range, sequence by sequence (get); np.memmap refuses empty files
        self._bin_mmap: np.ndarray | None = None if fs.is_remote(bin_path) else \
            np.memmap(bin_path, mode="r", dtype=np.uint8) if self.bin_bytes else np.zeros(0, np.uint8)

    def _validate(self, idx_path: str, bin_path: str) -> None:
        s = len(self.sizes)
        docs = self.document_indices
        if len(docs) == 0 or docs[0] != 0 or docs[-1] != s:
            raise BloomstackError(
                f"{idx_path}: the document index must start at 0 and end at the number of sequences ({s}); "
                "the index is corrupt or was written by an old tool (rebuild it)"
            )
        itemsize = self.dtype.itemsize
        bin_size = self.bin_bytes
        if s == 0:
            expected_bin = 0
        else:
            if self.pointers[0] != 0:
                raise BloomstackError(f"{idx_path}: first sequence pointer is not 0 (corrupt index)")
            expected_bin = int(self.pointers[-1]) + int(self.sizes[-1]) * itemsize
        if bin_size != expected_bin:
            raise BloomstackError(
                f"{bin_path}: data file is {bin_size} bytes but {idx_path} describes {expected_bin}: "
                "the .bin is truncated or does not belong to this .idx; rebuild the dataset"
            )
        # Full consistency of sizes and pointers: a vectorised pass, ~10 ns per sequence.
        if s and (self.sizes.min() < 0 or np.any(np.diff(docs) < 0)):
            raise BloomstackError(f"{idx_path}: negative sizes or decreasing document index (corrupt index)")
        if s > 1:
            ends = np.cumsum(self.sizes[:-1], dtype=np.int64) * itemsize
            if not np.array_equal(ends, self.pointers[1:]):
                raise BloomstackError(f"{idx_path}: sequence pointers disagree with sequence sizes (corrupt index)")

    # -- pickling: reopen by prefix (DataLoader workers, Dask) instead of shipping the mapping.
    def __getstate__(self) -> str:
        return self.prefix

    def __setstate__(self, prefix: str) -> None:
        self.prefix = prefix
        self._open()

    def __len__(self) -> int:
        return len(self.sizes)

    @property
    def num_documents(self) -> int:
        return len(self.document_indices) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.sizes.sum(dtype=np.int64))

    def get(self, i: int, offset: int = 0, length: int | None = None) -> np.ndarray:
        """Tokens ``[offset, offset + length)`` of sequence ``i`` (to its end when length is None)."""
        size = int(self.sizes[i])
        if length is None:
            length = size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise IndexError(f"window [{offset}, {offset + length}) outside sequence {i} of length {size}")
        start = int(self.pointers[i]) + offset * self.dtype.itemsize
        if self._bin_mmap is None:  # remote: one ranged request for the window
            end = start + length * self.dtype.itemsize
            data = fs.read_bytes(data_file_path(self.prefix), start, end) if length else b""
            return np.frombuffer(data, dtype=self.dtype, count=length)
        return np.frombuffer(self._bin_mmap, dtype=self.dtype, count=length, offset=start)

    @overload
    def __getitem__(self, i: int) -> np.ndarray: ...

    @overload
    def __getitem__(self, i: slice) -> list[np.ndarray]: ...

    def __getitem__(self, i: int | slice) -> np.ndarray | list[np.ndarray]:
        if isinstance(i, slice):
            return [self.get(j) for j in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"sequence {i} out of range for {len(self)} sequences in {self.prefix}")
        return self.get(i)

    def __repr__(self) -> str:
        return (
            f"IndexedDataset({self.prefix!r}, sequences={len(self)}, documents={self.num_documents}, "
            f"dtype={self.dtype.name})"
        )


def _write_index(path: str, dtype: np.dtype, sizes: np.ndarray, document_indices: np.ndarray) -> None:
    """Write an .idx for ``sizes`` (int32) and ``document_indices`` (int64) to ``path`` (a temp name) and
    sync it."""
    sizes = np.ascontiguousarray(sizes, dtype="<i4")
    document_indices = np.ascontiguousarray(document_indices, dtype="<i8")
    pointers = np.zeros(len(sizes), dtype="<i8")
    if len(sizes) > 1:
        np.cumsum(sizes[:-1], dtype=np.int64, out=pointers[1:])
        pointers *= dtype.itemsize
    with open(path, "wb") as f:
        f.write(INDEX_MAGIC)
        f.write(struct.pack("<Q", INDEX_VERSION))
        f.write(struct.pack("<B", CODE_OF_DTYPE[np.dtype(dtype)]))
        f.write(struct.pack("<Q", len(sizes)))  # S: number of sequences
        f.write(struct.pack("<Q", len(document_indices)))  # D: document index length incl. leading 0
        f.write(sizes.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(document_indices.tobytes(order="C"))
        durable.sync_file(f)


def _publish(tmp_bin: str, tmp_idx: str, prefix: str) -> None:
    """Move both temp files into place, the .idx last (see ``durable.publish``)."""
    durable.publish([(tmp_bin, data_file_path(prefix)), (tmp_idx, index_file_path(prefix))])


def _temp_pair(prefix: str) -> tuple[str, str]:
    """Temp names for ``prefix``'s .bin and .idx, beside them."""
    return durable.temp_path(data_file_path(prefix)), durable.temp_path(index_file_path(prefix))


class IndexedDatasetWriter:
    """Streams documents into ``PREFIX.bin/.idx``; one sequence per document, empty documents skipped.

    Use as a context manager: on an exception the temp files are removed and nothing is published.
    """

    def __init__(self, prefix: str | os.PathLike, dtype: np.dtype | type = np.int32):
        self.prefix = os.fspath(prefix)
        self.dtype = np.dtype(dtype)
        if self.dtype not in CODE_OF_DTYPE:
            raise BloomstackError(f"unsupported token dtype {self.dtype} for {self.prefix}")
        self._tmp_bin, self._tmp_idx = _temp_pair(self.prefix)
        parent = os.path.dirname(os.path.abspath(self.prefix))
        try:
            os.makedirs(parent, exist_ok=True)
            self._bin = open(self._tmp_bin, "wb")  # noqa: SIM115 - closed in finalize/abort
        except OSError as exc:
            raise BloomstackError(f"{parent}: cannot write the dataset there ({exc.strerror})") from None
        self._sizes = array("i")  # int32, 4 B per sequence
        self._documents: array | None = None  # document ends (int64), once add_sentences is used
        self._max_token = np.iinfo(self.dtype).max if self.dtype.kind in "iu" else None
        self.skipped_empty = 0
        self._done = False

    def add_document(self, tokens: Sequence[int] | np.ndarray) -> bool:
        """Append one document as one sequence. Returns False (and writes nothing) for an empty one."""
        arr = np.asarray(tokens)
        if arr.size == 0:
            self.skipped_empty += 1
            return False
        if self._max_token is not None and arr.max() > self._max_token:
            raise BloomstackError(
                f"{self.prefix}: token id {int(arr.max())} does not fit dtype {self.dtype.name}; "
                "use int32 for vocabularies of 65,500 tokens or more"
            )
        self._bin.write(arr.astype(self.dtype, copy=False).tobytes(order="C"))
        self._sizes.append(arr.size)
        return True

    def add_flat(self, tokens: np.ndarray, lengths: np.ndarray) -> int:
        """Append ``len(lengths)`` documents given end to end: document i is the next ``lengths[i]`` tokens of
        ``tokens`` (the same bytes as ``add_document`` of each, in one write). Returns how many were written
        (empty ones are skipped)."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if int(lengths.sum()) != tokens.size:
            raise ValueError(f"lengths add up to {int(lengths.sum())}, not to the {tokens.size} tokens given")
        if tokens.size and self._max_token is not None and tokens.max() > self._max_token:
            return self.add_documents(np.split(tokens, np.cumsum(lengths)[:-1]))  # raises naming the id
        kept = lengths[lengths > 0]
        self.skipped_empty += len(lengths) - len(kept)
        self._bin.write(tokens.astype(self.dtype, copy=False).tobytes(order="C"))
        self._sizes.extend(kept.astype(np.int32).tolist())
        return len(kept)

    def add_sentences(self, tokens: Sequence[int] | np.ndarray, lengths: Sequence[int]) -> None:
        """Append one document of ``len(lengths)`` sequences (Megatron-LM's sentence-level datasets: sequence i is
        the next ``lengths[i]`` tokens). A document without sequences is kept, as megatron-core's builder keeps it
        (its document index repeats). A writer given this takes no ``add_document``/``add_flat``."""
        arr = np.asarray(tokens, dtype=np.int64)
        if sum(lengths) != arr.size or any(n <= 0 for n in lengths):
            raise ValueError(f"sentence lengths {list(lengths)[:8]} do not cut the {arr.size} tokens given")
        if arr.size and self._max_token is not None and arr.max() > self._max_token:
            raise BloomstackError(f"{self.prefix}: token id {int(arr.max())} does not fit dtype {self.dtype.name}")
        if self._documents is None:
            self._documents = array("q", range(1, len(self._sizes) + 1))
        self._bin.write(arr.astype(self.dtype).tobytes(order="C"))
        self._sizes.extend(lengths)
        self._documents.append(len(self._sizes))

    def add_documents(self, documents: Iterable[Sequence[int] | np.ndarray]) -> int:
        """Append several documents; returns how many were written (empty ones are skipped)."""
        return sum(self.add_document(d) for d in documents)

    def __len__(self) -> int:
        return len(self._sizes)

    def finalize(self) -> None:
        """Flush, fsync, write the index and publish both files atomically."""
        durable.sync_file(self._bin)
        self._bin.close()
        sizes = np.frombuffer(self._sizes, dtype=np.int32) if len(self._sizes) else np.zeros(0, np.int32)
        documents = np.arange(len(sizes) + 1, dtype=np.int64) if self._documents is None else \
            np.concatenate([[0], np.frombuffer(self._documents, dtype=np.int64)]).astype(np.int64)
        if documents[-1] != len(sizes):
            raise ValueError(f"{self.prefix}: add_sentences and add_document mixed on one writer")
        _write_index(self._tmp_idx, self.dtype, sizes, documents)
        _publish(self._tmp_bin, self._tmp_idx, self.prefix)
        self._done = True

    def abort(self) -> None:
        """Drop everything written so far; the final files are left untouched."""
        if not self._bin.closed:
            self._bin.close()
        for path in (self._tmp_bin, self._tmp_idx):
            if os.path.exists(path):
                os.remove(path)
        self._done = True

    def __enter__(self) -> IndexedDatasetWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._done:
            return
        if exc_type is None:
            self.finalize()
        else:
            self.abort()


def merge_datasets(prefixes: Sequence[str | os.PathLike], out_prefix: str | os.PathLike) -> IndexedDataset:
    """Concatenate datasets in the given order into ``out_prefix`` (Megatron's ``merge_file_`` semantics).

    Sequences and documents keep their order; document indices are offset; pointers are recomputed. The
    ``.bin`` files are streamed (``copyfileobj``), so memory is O(sequences), never O(tokens).
    """
    out_prefix = os.fspath(out_prefix)
    if not prefixes:
        raise BloomstackError(f"{out_prefix}: nothing to merge (no input datasets)")
    parts = [IndexedDataset(p) for p in prefixes]
    dtype = parts[0].dtype
    for part in parts[1:]:
        if part.dtype != dtype:
            raise BloomstackError(
                f"cannot merge {part.prefix} ({part.dtype.name}) with {parts[0].prefix} ({dtype.name}): "
                "all inputs must share one token dtype"
            )
    sizes = np.concatenate([p.sizes for p in parts]) if parts else np.zeros(0, np.int32)
    doc_chunks = [np.zeros(1, np.int64)]
    offset = 0
    for p in parts:
        doc_chunks.append(p.document_indices[1:] + offset)
        offset += len(p)
    document_indices = np.concatenate(doc_chunks)
    tmp_bin, tmp_idx = _temp_pair(out_prefix)
    Path(out_prefix).parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(tmp_bin, "wb") as out:
            for p in parts:
                with open(data_file_path(p.prefix), "rb") as src:
                    shutil.copyfileobj(src, out, length=16 << 20)
            durable.sync_file(out)
        _write_index(tmp_idx, dtype, sizes, document_indices)
        _publish(tmp_bin, tmp_idx, out_prefix)
    except BaseException:
        for path in (tmp_bin, tmp_idx):
            if os.path.exists(path):
                os.remove(path)
        raise
    return IndexedDataset(out_prefix)
