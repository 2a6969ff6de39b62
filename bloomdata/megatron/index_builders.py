"""The four index builders (document shuffle, sample index, sample shuffle, blend), in C++ and in numpy.

Each builder has a pure-numpy reference implementation here and a C++ twin in ``csrc/indices/helpers.cpp``
(``bloomdata._index_helpers``, built by ``pip install``). Both produce identical arrays; the tests check
that on every input they draw. ``backend=None`` picks C++ when the extension imports and numpy otherwise
(the install still works where no compiler is available, as with megatron's optional helpers).

The numpy versions are written for clarity, not speed, and follow megatron's algorithms
(docs/megatron-data.md, "Document index", "Sample index", "Shuffle index" and "The greedy rule"):

- document index: ``tile(documents, E)`` then ``RandomState.shuffle`` (the first E-1 epochs and the last
  one separately when the last epoch is separate). megatron builds the same array with ``np.mgrid``.
- sample index: row k is ``(entry holding global token k*L, offset of that token in it)``, which is the
  closed form of megatron's C++ loop (``searchsorted(cumsum(lengths), k*L, side="right")``); row 0 is
  (0, 0).
- shuffle index: ``arange`` split at the separate last epoch, each part shuffled by the same stream.
- blend: megatron's greedy rule ``argmax_i(w_i * max(k, 1) - c_i)`` with the lowest index winning ties,
  in IEEE float64 (Python floats never fuse the multiply-add); ``count_datasets`` is its per-dataset
  sample count (``np.bincount``), which the oversampling check reads on every load.
"""

from __future__ import annotations

import numpy as np

try:  # the C++ twin; absent when the optional extension could not be compiled
    from bloomdata import _index_helpers as _cpp
except ImportError:  # pragma: no cover - depends on the install
    _cpp = None

BACKENDS = ("cpp", "numpy")
INT32_MAX = int(np.iinfo(np.int32).max)
# megatron switches the shuffle index to int64 from this many samples on (gpt_dataset._build_shuffle_index).
SHUFFLE_INT64_FROM = int(np.iinfo(np.uint32).max) - 1


def cpp_available() -> bool:
    return _cpp is not None


def resolve_backend(backend: str | None) -> str:
    if backend is None:
        return "cpp" if _cpp is not None else "numpy"
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None, got {backend!r}")
    if backend == "cpp" and _cpp is None:
        raise RuntimeError(
            "the C++ index helpers (bloomdata._index_helpers) are not built; "
            "rebuild with `pip install --no-deps -e .` or use backend='numpy'"
        )
    return backend


class RandomStream:
    """One ``numpy.random.RandomState(seed)`` stream, consumed by successive shuffles in either backend."""

    def __init__(self, seed: int, backend: str | None = None):
        self.backend = resolve_backend(backend)
        self._state = _cpp.RandomState(seed) if self.backend == "cpp" else np.random.RandomState(seed)

    def shuffle(self, x: np.ndarray) -> None:
        """Shuffle a 1-D contiguous int32/uint32/int64/uint64 array in place."""
        if self.backend == "numpy":
            self._state.shuffle(x)
            return
        method = getattr(self._state, f"shuffle_{x.dtype.name}", None)
        if method is None or x.ndim != 1 or not x.flags.c_contiguous:
            raise TypeError(f"cannot shuffle a {x.dtype} array of shape {x.shape} in C++")
        method(x)

    @property
    def native(self):
        return self._state


def build_document_index(
    documents: np.ndarray, sizes: np.ndarray, num_epochs: int, separate_final_epoch: bool, stream: RandomStream
) -> tuple[np.ndarray, np.ndarray]:
    """(document_index int32[E*D], lengths int32[E*D]) with lengths[k] = sizes[document_index[k]]."""
    documents = np.ascontiguousarray(documents, dtype=np.int32)
    sizes = np.ascontiguousarray(sizes, dtype=np.int32)
    if stream.backend == "cpp":
        return _cpp.build_document_index(documents, sizes, num_epochs, separate_final_epoch, stream.native)
    if separate_final_epoch and num_epochs > 1:
        first = np.tile(documents, num_epochs - 1)
        stream.shuffle(first)
        last = documents.copy()
        stream.shuffle(last)
        document_index = np.concatenate((first, last))
    else:
        document_index = np.tile(documents, num_epochs)
        stream.shuffle(document_index)
    return document_index, sizes[document_index]


def build_sample_index(lengths: np.ndarray, seq_length: int, num_samples: int, dtype, backend: str) -> np.ndarray:
    """[num_samples + 1, 2] rows (document-index entry, token offset) at token k*seq_length."""
    dtype = np.dtype(dtype)
    lengths = np.ascontiguousarray(lengths, dtype=np.int32)
    if backend == "cpp":
        build = _cpp.build_sample_index_int32 if dtype == np.int32 else _cpp.build_sample_index_int64
        return build(lengths, seq_length, num_samples)
    ends = np.cumsum(lengths, dtype=np.int64)
    position = np.arange(1, num_samples + 1, dtype=np.int64) * seq_length
    entry = np.searchsorted(ends, position, side="right")
    out = np.zeros((num_samples + 1, 2), dtype=dtype)
    out[1:, 0] = entry
    out[1:, 1] = position - (ends[entry] - lengths[entry])
    return out


def shuffle_index_dtype(total: int) -> np.dtype:
    return np.dtype(np.int64) if total >= SHUFFLE_INT64_FROM else np.dtype(np.uint32)


def build_shuffle_index(first: int, total: int, stream: RandomStream) -> np.ndarray:
    """arange(total), with [0, first) and [first, total) shuffled in that order."""
    dtype = shuffle_index_dtype(total)
    if stream.backend == "cpp":
        build = _cpp.build_shuffle_index_uint32 if dtype == np.uint32 else _cpp.build_shuffle_index_int64
        return build(first, total, stream.native)
    head = np.arange(0, first, dtype=dtype)
    stream.shuffle(head)
    if first == total:
        return head
    tail = np.arange(first, total, dtype=dtype)
    stream.shuffle(tail)
    return np.concatenate((head, tail))


def build_blending_indices(weights, size: int, index_dtype, backend: str) -> tuple[np.ndarray, np.ndarray]:
    """(dataset_index[size] of index_dtype (int16 or uint8), dataset_sample_index int64[size])."""
    index_dtype = np.dtype(index_dtype)
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    if backend == "cpp":
        build = _cpp.build_blending_indices_int16 if index_dtype == np.int16 else _cpp.build_blending_indices_uint8
        return build(weights, size)
    w = [float(x) for x in weights]
    counts = [0.0] * len(w)
    dataset_index = np.zeros(size, dtype=index_dtype)
    sample_index = np.zeros(size, dtype=np.int64)
    for k in range(size):
        kd = max(float(k), 1.0)
        best, best_err = 0, w[0] * kd - counts[0]
        for i in range(1, len(w)):
            err = w[i] * kd - counts[i]
            if err > best_err:
                best, best_err = i, err
        dataset_index[k] = best
        sample_index[k] = int(counts[best])
        counts[best] += 1.0
    return dataset_index, sample_index


def count_datasets(dataset_index: np.ndarray, num_datasets: int, backend: str | None = None) -> np.ndarray:
    """int64[num_datasets]: how many blend samples each dataset gives (np.bincount of ``dataset_index``)."""
    backend = resolve_backend(backend)
    index = np.ascontiguousarray(dataset_index)
    if backend == "cpp" and index.dtype in (np.int16, np.uint8):
        count = _cpp.count_datasets_int16 if index.dtype == np.int16 else _cpp.count_datasets_uint8
        return count(index, num_datasets)
    return np.bincount(index.astype(np.int64), minlength=num_datasets)
