"""IndexedDataset / IndexedDatasetWriter / merge_datasets against megatron-core 0.16's reader and builder.

Byte compatibility is checked both ways: megatron-core reads what we write, we read what megatron-core's
``IndexedDatasetBuilder`` writes, and both writers produce identical bytes for the same documents.
"""

from __future__ import annotations

import os
import pickle
import struct

import numpy as np
import pytest

from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import (
    IndexedDataset,
    IndexedDatasetWriter,
    best_fitting_dtype,
    data_file_path,
    index_file_path,
    merge_datasets,
)


def _random_docs(rng: np.random.Generator, n: int, vocab: int, max_len: int = 50) -> list[np.ndarray]:
    return [rng.integers(0, vocab, size=rng.integers(1, max_len)) for _ in range(n)]


def _write(prefix, docs, dtype) -> IndexedDataset:
    with IndexedDatasetWriter(prefix, dtype) as w:
        for d in docs:
            w.add_document(d)
    return IndexedDataset(prefix)


def _megatron_write(prefix: str, docs, dtype) -> None:
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(data_file_path(prefix), dtype=dtype)
    for d in docs:
        builder.add_item(torch.from_numpy(np.asarray(d, dtype=dtype)))
        builder.end_document()
    builder.finalize(index_file_path(prefix))


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_round_trip_and_megatron_reads_ours(tmp_path, dtype):
    from megatron.core.datasets.indexed_dataset import IndexedDataset as MegatronIndexedDataset

    rng = np.random.default_rng(0)
    docs = _random_docs(rng, 200, 60000 if dtype == np.uint16 else 250680)
    ds = _write(tmp_path / "ours", docs, dtype)
    assert len(ds) == 200 and ds.num_documents == 200 and ds.dtype == np.dtype(dtype)
    for i in (0, 17, 199):
        np.testing.assert_array_equal(ds[i], docs[i])
    np.testing.assert_array_equal(ds.get(5, offset=1, length=2), docs[5][1:3])
    assert ds.num_tokens == sum(len(d) for d in docs)

    theirs = MegatronIndexedDataset(str(tmp_path / "ours"), mmap=True)
    assert len(theirs) == len(ds)
    np.testing.assert_array_equal(theirs.sequence_lengths, ds.sizes)
    np.testing.assert_array_equal(theirs.document_indices, ds.document_indices)
    for i in range(0, 200, 37):
        np.testing.assert_array_equal(theirs[i], docs[i])


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_bytes_identical_to_megatron_builder_and_readable(tmp_path, dtype):
    rng = np.random.default_rng(1)
    docs = _random_docs(rng, 150, 30000)
    _write(tmp_path / "ours", docs, dtype)
    _megatron_write(str(tmp_path / "theirs"), docs, dtype)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"ours{suffix}").read_bytes() == (tmp_path / f"theirs{suffix}").read_bytes()
    theirs = IndexedDataset(tmp_path / "theirs")
    np.testing.assert_array_equal(theirs[42], docs[42])


def test_empty_documents_are_not_written(tmp_path):
    with IndexedDatasetWriter(tmp_path / "d", np.uint16) as w:
        assert w.add_document([1, 2]) is True
        assert w.add_document([]) is False
        w.add_document(np.array([3], dtype=np.int64))
    ds = IndexedDataset(tmp_path / "d")
    assert len(ds) == 2 and w.skipped_empty == 1
    assert list(ds.document_indices) == [0, 1, 2]


@pytest.mark.parametrize("dtype", [np.uint16, np.int32])
def test_add_flat_writes_what_add_document_writes(tmp_path, dtype):
    """Documents given end to end (the build's batches) give the bytes of one add_document each, empty ones
    skipped; an id too large for the dtype is refused as add_document refuses it."""
    docs = _random_docs(np.random.default_rng(3), 40, 60000) + [np.zeros(0, np.int64)]
    docs.insert(5, np.zeros(0, np.int64))
    with IndexedDatasetWriter(tmp_path / "one", dtype) as w:
        w.add_documents(docs)
    with IndexedDatasetWriter(tmp_path / "flat", dtype) as w:
        lengths = [len(d) for d in docs]
        assert w.add_flat(np.concatenate(docs[:20]).astype(np.uint32), np.array(lengths[:20])) == 19
        assert w.add_flat(np.concatenate(docs[20:]).astype(np.uint32), np.array(lengths[20:])) == 21
        assert w.skipped_empty == 2
        with pytest.raises(ValueError, match="lengths add up to"):
            w.add_flat(np.zeros(3, np.uint32), np.array([1, 1]))
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"flat{suffix}").read_bytes() == (tmp_path / f"one{suffix}").read_bytes()
    with pytest.raises(BloomstackError, match="does not fit dtype uint16"):
        with IndexedDatasetWriter(tmp_path / "x", np.uint16) as w:
            w.add_flat(np.array([1, 70000, 2], np.uint32), np.array([2, 1]))


def test_empty_dataset(tmp_path):
    with IndexedDatasetWriter(tmp_path / "e", np.int32):
        pass
    ds = IndexedDataset(tmp_path / "e")
    assert len(ds) == 0 and ds.num_tokens == 0 and list(ds.document_indices) == [0]


def test_token_too_large_for_dtype(tmp_path):
    with pytest.raises(BloomstackError, match="does not fit dtype uint16"):
        with IndexedDatasetWriter(tmp_path / "x", np.uint16) as w:
            w.add_document([70000])
    assert not os.path.exists(tmp_path / "x.idx") and not list(tmp_path.glob("x.*tmp*"))


def test_best_fitting_dtype():
    assert best_fitting_dtype(65499) == np.uint16
    assert best_fitting_dtype(65500) == np.int32
    assert best_fitting_dtype(250680) == np.int32


def test_merge_preserves_order_and_offsets(tmp_path):
    rng = np.random.default_rng(2)
    parts = [_random_docs(rng, n, 1000) for n in (5, 0, 12, 3)]
    prefixes = []
    for k, docs in enumerate(parts):
        _write(tmp_path / f"p{k}", docs, np.uint16)
        prefixes.append(tmp_path / f"p{k}")
    merged = merge_datasets(prefixes, tmp_path / "merged")
    flat = [d for docs in parts for d in docs]
    assert len(merged) == len(flat)
    assert list(merged.document_indices) == list(range(len(flat) + 1))
    for i, d in enumerate(flat):
        np.testing.assert_array_equal(merged[i], d)
    # Same bytes as writing everything in one go.
    _write(tmp_path / "direct", flat, np.uint16)
    for suffix in (".bin", ".idx"):
        assert (tmp_path / f"merged{suffix}").read_bytes() == (tmp_path / f"direct{suffix}").read_bytes()


def test_merge_rejects_mixed_dtypes(tmp_path):
    _write(tmp_path / "a", [[1, 2]], np.uint16)
    _write(tmp_path / "b", [[1, 2]], np.int32)
    with pytest.raises(BloomstackError, match="share one token dtype"):
        merge_datasets([tmp_path / "a", tmp_path / "b"], tmp_path / "m")


def test_pickle_reopens(tmp_path):
    ds = _write(tmp_path / "p", [[1, 2, 3], [4]], np.uint16)
    clone = pickle.loads(pickle.dumps(ds))
    np.testing.assert_array_equal(clone[0], [1, 2, 3])


@pytest.fixture
def dataset(tmp_path):
    rng = np.random.default_rng(3)
    _write(tmp_path / "c", _random_docs(rng, 40, 1000), np.uint16)
    return tmp_path / "c"


def _corrupt(path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: open(f"{p}.idx", "r+b").truncate(100), "truncated or corrupt"),
        (lambda p: open(f"{p}.idx", "r+b").truncate(10), "not a Megatron MMIDIDX"),
        (lambda p: _corrupt(f"{p}.idx", 0, b"XXXX"), "bad magic"),
        (lambda p: _corrupt(f"{p}.idx", 9, struct.pack("<Q", 2)), "version 2"),
        (lambda p: _corrupt(f"{p}.idx", 17, b"\x09"), "unknown dtype code 9"),
        (lambda p: open(f"{p}.bin", "r+b").truncate(7), "truncated or does not belong"),
        (lambda p: _corrupt(f"{p}.idx", 34 + 4 * 3, struct.pack("<i", 10**6)), "truncated or does not belong|disagree"),
        (lambda p: os.remove(f"{p}.bin"), "data file not found"),
        (lambda p: os.remove(f"{p}.idx"), "index file not found"),
    ],
)
def test_corrupt_files_raise_naming_the_file(dataset, damage, message):
    damage(dataset)
    with pytest.raises(BloomstackError, match=message) as info:
        IndexedDataset(dataset)
    assert str(dataset) in str(info.value)


def test_failed_write_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with IndexedDatasetWriter(tmp_path / "f", np.uint16) as w:
            w.add_document([1, 2])
            raise RuntimeError("crash in the middle")
    assert list(tmp_path.iterdir()) == []


def test_rewrite_cut_between_the_renames_leaves_no_stale_index(tmp_path, monkeypatch):
    """Rewriting a dataset in place, a writer killed after the new .bin is in place but before the new .idx
    is must leave no .idx at all: the old one would describe the new .bin wrongly (the old .idx is removed
    first, the new one renamed last)."""
    _write(tmp_path / "d", [[1, 2, 3]] * 5, np.uint16)
    rename = os.replace

    def killed_before_the_idx(src, dst):
        if str(dst).endswith(".idx"):
            raise KeyboardInterrupt
        rename(src, dst)

    monkeypatch.setattr(os, "replace", killed_before_the_idx)
    with pytest.raises(KeyboardInterrupt):
        _write(tmp_path / "d", [[4, 5]], np.uint16)
    monkeypatch.undo()
    assert os.path.getsize(tmp_path / "d.bin") == 4 and not (tmp_path / "d.idx").exists()
    with pytest.raises(BloomstackError, match="index file not found"):
        IndexedDataset(tmp_path / "d")
    assert _write(tmp_path / "d", [[4, 5]], np.uint16)[0].tolist() == [4, 5]  # a rerun publishes the pair


def test_unwritable_output(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(BloomstackError, match="cannot write"):
        IndexedDatasetWriter(blocker / "sub" / "x", np.uint16)
