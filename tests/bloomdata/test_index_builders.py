"""The C++ builders (bloomdata._index_helpers) equal the numpy ones, and the numpy RandomState stream.

Covers every dtype and seed edge (0, 2**32 - 1), chained shuffles on one stream, zero-length documents,
both sample-index widths, the multi-threaded sample-index path (> 65,536 entries) and blend near-ties.
"""

from __future__ import annotations

import numpy as np
import pytest

from bloomdata.megatron import index_builders as ib

pytestmark = pytest.mark.skipif(not ib.cpp_available(), reason="C++ index helpers not built")


@pytest.fixture
def threaded(monkeypatch):
    """Lower the C++ size thresholds so tiny inputs take the pipelined / multi-threaded / packed-pair paths,
    on three threads (uneven splits; a Dask LocalCluster earlier in the session may have left OMP_NUM_THREADS=1)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    old = ib._cpp.set_thresholds(1000, 20_000, 0)
    yield
    ib._cpp.set_thresholds(*old)


@pytest.mark.parametrize("seed", [0, 42, 2**32 - 1])
@pytest.mark.parametrize("dtype", [np.int32, np.uint32, np.int64, np.uint64])
def test_shuffle_matches_numpy_randomstate(seed, dtype):
    ref, cpp = np.random.RandomState(seed), ib.RandomStream(seed, "cpp")
    for n in (0, 1, 2, 3, 17, 1000, 70_001):  # one stream across several shuffles, as the builders use it
        a = np.arange(n, dtype=dtype)
        b = a.copy()
        ref.shuffle(a)
        cpp.shuffle(b)
        np.testing.assert_array_equal(a, b)


def test_pipelined_shuffle_matches_numpy(threaded):
    # the C++ shuffle draws the next block of j's on a helper thread while swapping this one
    a = np.arange(300_000, dtype=np.uint32)  # 16 blocks of draws
    b = a.copy()
    ref, cpp = np.random.RandomState(42), ib.RandomStream(42, "cpp")
    ref.shuffle(a)
    cpp.shuffle(b)
    np.testing.assert_array_equal(a, b)
    ref.shuffle(a[:1000])  # the stream continues identically after a pipelined shuffle
    cpp.shuffle(b[:1000])
    np.testing.assert_array_equal(a, b)


def test_shuffle_rejects_unsupported_arrays():
    with pytest.raises(TypeError):
        ib.RandomStream(1, "cpp").shuffle(np.arange(10, dtype=np.float64))


@pytest.mark.parametrize("separate", [False, True])
@pytest.mark.parametrize("threads", [False, True])
def test_document_index_matches(separate, threads, request):
    if threads:
        request.getfixturevalue("threaded")
    rng = np.random.default_rng(0)
    sizes = rng.integers(0, 50, size=500).astype(np.int32)
    documents = np.arange(30, 470, dtype=np.int32)
    out = {}
    for backend in ("numpy", "cpp"):
        stream = ib.RandomStream(7, backend)
        doc, lengths = ib.build_document_index(documents, sizes, 4, separate, stream)
        out[backend] = (doc, lengths, ib.build_shuffle_index(900, 1000, stream))
    for a, b in zip(out["numpy"], out["cpp"]):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(out["cpp"][1], sizes[out["cpp"][0]])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("seq_length", [1, 7, 2048])
def test_sample_index_matches_with_threads_and_empty_documents(dtype, seq_length, threaded):
    rng = np.random.default_rng(1)
    lengths = rng.integers(0, 40, size=200_000).astype(np.int32)  # several C++ threads (fixture)
    lengths[:3] = 0  # row 0 stays (0, 0) even when the first entries are empty
    n = (int(lengths.sum(dtype=np.int64)) - 1) // seq_length
    a = ib.build_sample_index(lengths, seq_length, n, dtype, "numpy")
    b = ib.build_sample_index(lengths, seq_length, n, dtype, "cpp")
    assert a.dtype == b.dtype == dtype and a.shape == (n + 1, 2)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(b[0], [0, 0])


@pytest.mark.parametrize("total", [0, 1, 1000])
def test_shuffle_index_matches(total):
    for first in {0, total // 2, total}:
        a = ib.build_shuffle_index(first, total, ib.RandomStream(3, "numpy"))
        b = ib.build_shuffle_index(first, total, ib.RandomStream(3, "cpp"))
        assert a.dtype == b.dtype == np.uint32
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    "weights",
    [
        [1 / 3, 1 / 3, 1 / 3],  # exact ties every few samples
        [1 / 13] * 13,  # ties across the register kernel's vectors (lanes of vectors 0 to 3 tie)
        [0.2, 0.05, 0.05, 0.05, 0.05, 0.2, 0.1, 0.1, 0.2],  # ties between some lanes only
        [0.001, 0.999],  # extreme ratio
        list(np.random.default_rng(2).dirichlet(np.ones(28))),  # 28 datasets: the register-resident AVX2 kernel
        list(np.random.default_rng(3).dirichlet(np.ones(32))),  # its widest instance (8 vectors)
        list(np.random.default_rng(5).dirichlet(np.ones(59))),  # BLOOM's 46 languages + 13 code: the 33-256 path
    ],
)
@pytest.mark.parametrize("dtype", [np.int16, np.uint8])
def test_blending_indices_match(weights, dtype):
    a = ib.build_blending_indices(weights, 20_000, dtype, "numpy")
    b = ib.build_blending_indices(weights, 20_000, dtype, "cpp")
    for x, y in zip(a, b):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)
    build = ib._cpp.build_blending_indices_int16 if dtype == np.int16 else ib._cpp.build_blending_indices_uint8
    scalar = build(np.asarray(weights, dtype=np.float64), 20_000, simd=False)  # the non-AVX2 path
    for x, y in zip(a, scalar):
        np.testing.assert_array_equal(x, y)
    counts = np.bincount(b[0].astype(np.int64), minlength=len(weights))
    assert np.all(np.abs(counts - np.array(weights) * 20_000) <= 2)  # greedy stays within +-1 or so


@pytest.mark.parametrize("warmup", [0, 3, 1000])
@pytest.mark.parametrize("simd", [True, False])
@pytest.mark.parametrize("k", [3, 28, 59])
def test_blend_split_in_two_halves_is_exact(k, simd, warmup, monkeypatch):
    """The two-thread blend (second half from guessed counts, checked at the midpoint) equals one sequential pass,
    both when the guess converges and when the check fails and the second half is re-run (warm-up 0)."""
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the helpers' thread count (a Dask LocalCluster elsewhere sets 1)
    weights = np.random.default_rng(k).dirichlet(np.ones(k)) if k > 3 else np.full(3, 1 / 3)
    expected = ib.build_blending_indices(weights, 20_001, np.int16, "numpy")
    old = ib._cpp.set_blend_split(2, warmup)
    try:
        splits, reruns = ib._cpp.blend_split_stats()
        got = ib._cpp.build_blending_indices_int16(weights, 20_001, simd=simd)
        after = ib._cpp.blend_split_stats()
    finally:
        ib._cpp.set_blend_split(*old)
    assert after[0] == splits + 1  # the split path ran
    if warmup == 0 and k == 28:
        assert after[1] == reruns + 1  # guessed counts off at the midpoint: the second half was redone
    for x, y in zip(expected, got):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("dtype", [np.int16, np.uint8])
def test_count_datasets_matches_bincount(dtype, threaded):
    weights = list(np.random.default_rng(6).dirichlet(np.ones(28)))
    index, _ = ib.build_blending_indices(weights, 100_003, dtype, "cpp")  # threaded: 5 chunks, odd tail
    expected = np.bincount(index.astype(np.int64), minlength=30)
    np.testing.assert_array_equal(ib.count_datasets(index, 30, "cpp"), expected)
    np.testing.assert_array_equal(ib.count_datasets(index, 30, "numpy"), expected)
    bad = index.copy()
    bad[77_777] = 29 if dtype == np.uint8 else -1
    with pytest.raises(IndexError, match="position 77777"):
        ib.count_datasets(bad, 29, "cpp")


@pytest.mark.parametrize("size", [50_000, 700_001])  # 700,001: two verified halves with the default thresholds
def test_blending_indices_match_megatron_helper(size, monkeypatch):
    from megatron.core.datasets import helpers_cpp

    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    tokens = np.random.default_rng(4).lognormal(20, 2, 28)  # alpha = 0.3 weights over 3 orders of magnitude
    weights = tokens**0.3 / np.sum(tokens**0.3)
    ref_index = np.zeros(size, dtype=np.int16)
    ref_sample = np.zeros(size, dtype=np.int64)
    helpers_cpp.build_blending_indices(ref_index, ref_sample, weights, 28, size, False)
    splits = ib._cpp.blend_split_stats()[0]
    index, sample = ib.build_blending_indices(weights, size, np.int16, "cpp")
    assert ib._cpp.blend_split_stats()[0] == splits + (size >= 2**19)
    np.testing.assert_array_equal(index, ref_index)
    np.testing.assert_array_equal(sample, ref_sample)


def test_backend_resolution():
    assert ib.resolve_backend(None) == "cpp"
    with pytest.raises(ValueError):
        ib.resolve_backend("fortran")
