"""GPTSamples against megatron-core 0.16.1's GPTDataset (compat="core") and BLOOM's algorithm (compat="bloom").

The grid covers several seeds, sequence lengths, document ranges and sample counts giving one epoch, two
epochs with and without a separate last epoch, and many epochs. Each case compares the three arrays (values
and dtypes) with megatron-core's and a few served samples token for token, for both builder backends.
"""

from __future__ import annotations

import numpy as np
import pytest

from bloomdata.errors import BloomstackError
from bloomdata.megatron import index_builders
from bloomdata.megatron.gpt_samples import GPTSamples, SampleSettings, plan_epochs
from tests.bloomdata.megatron_oracle import gpt_dataset, megatron_tokens, write_dataset

BACKENDS = ["numpy"] + (["cpp"] if index_builders.cpp_available() else [])
NAMES = ["document_index", "sample_index", "shuffle_index"]


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("samples") / "ds", num_docs=300, seed=0)


def _sample_counts(tokens: int, seq_length: int) -> dict[str, int | None]:
    per_epoch = (tokens - 1) // seq_length
    return {
        "one_pass": None,
        "one_epoch": per_epoch // 3,
        "two_epochs_separate_last": per_epoch + per_epoch // 10,
        "two_epochs_joint_last": 2 * per_epoch - 1,
        "many_epochs": 7 * per_epoch + per_epoch // 2,
    }


def _assert_same(ours: GPTSamples, theirs) -> None:
    for name in NAMES:
        a, b = getattr(ours, name), getattr(theirs, name)
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert len(ours) == len(theirs)
    for i in {0, 1, len(ours) // 2, len(ours) - 1}:
        np.testing.assert_array_equal(ours[i], megatron_tokens(theirs, i))


@pytest.mark.parametrize("seed", [3, 2**32 - 1])
@pytest.mark.parametrize("seq_length", [8, 45])
@pytest.mark.parametrize("doc_range", [(0, 300), (20, 280)])
def test_core_matches_megatron_grid(prefix, seed, seq_length, doc_range):
    from bloomdata.megatron.indexed import IndexedDataset

    ds = IndexedDataset(prefix)
    tokens = int(ds.sizes[doc_range[0] : doc_range[1]].sum())
    separations = set()
    for case, n in _sample_counts(tokens, seq_length).items():
        theirs = gpt_dataset(prefix, *doc_range, n, seed, seq_length)
        for backend in BACKENDS:
            ours = GPTSamples(ds, n, SampleSettings(seq_length, seed, "core", backend=backend), doc_range)
            _assert_same(ours, theirs)
        separations.add((ours.plan.num_epochs > 1, ours.plan.separate_final_epoch))
        assert len(ours[0]) == seq_length + 1, case
    # the grid really exercises one epoch, a joint last epoch and a separate last epoch
    assert separations == {(False, False), (True, False), (True, True)}


def test_core_split_names_and_valid_split(prefix):
    theirs = gpt_dataset(prefix, 100, 200, 500, 9, 16, split="valid")
    ours = GPTSamples(prefix, 500, SampleSettings(16, 9, "core"), (100, 200), "valid")
    _assert_same(ours, theirs)


def test_empty_documents_are_skipped_like_megatron(tmp_path):
    prefix = write_dataset(tmp_path / "holes", num_docs=120, seed=5, empty_every=4)
    theirs = gpt_dataset(prefix, 1, 120, 400, 11, 12)
    for backend in BACKENDS:
        _assert_same(GPTSamples(prefix, 400, SampleSettings(12, 11, backend=backend), (1, 120)), theirs)


def _bloom_reference(sizes, documents, num_samples, seq_length, seed):
    """Megatron-DeepSpeed's GPT index build as its gpt_dataset.py does it (mgrid, Python sample loop)."""
    tokens = int(np.sum(sizes[documents]))
    epochs = 0
    while True:
        epochs += 1
        if (epochs * tokens - 1) // seq_length >= num_samples:
            break
    separate = False
    if epochs > 1:
        from_last = num_samples - ((epochs - 1) * tokens - 1) // seq_length
        separate = from_last < int(0.95 * ((tokens - 1) // seq_length))
    rng = np.random.RandomState(seed)

    def doc_idx(n_epochs):
        d = np.mgrid[0:n_epochs, 0 : len(documents)][1]
        d[:] = documents
        d = d.reshape(-1).astype(np.int32)
        rng.shuffle(d)
        return d

    doc = np.concatenate((doc_idx(epochs - 1), doc_idx(1))) if separate else doc_idx(epochs)
    total = (epochs * tokens - 1) // seq_length
    sample = np.zeros((total + 1, 2), dtype=np.int32)
    k, d, offset = 1, 0, 0
    while k <= total:
        remaining = seq_length + 1
        while remaining != 0:
            length = sizes[doc[d]] - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - 1
                remaining = 0
            else:
                d, offset = d + 1, 0
        sample[k] = d, offset
        k += 1
    first = (((epochs - 1) * tokens - 1) // seq_length) if separate else total
    head = np.arange(first, dtype=np.uint32)
    rng.shuffle(head)
    tail = np.arange(first, total, dtype=np.uint32)
    rng.shuffle(tail)
    return doc, sample, np.concatenate((head, tail)), separate


@pytest.mark.parametrize("backend", BACKENDS)
def test_bloom_mode_uses_the_095_cutoff(prefix, backend):
    from bloomdata.megatron.indexed import IndexedDataset

    ds = IndexedDataset(prefix)
    seq_length, seed = 20, 42
    tokens = int(ds.sizes.sum())
    per_epoch = (tokens - 1) // seq_length
    n = per_epoch + int(0.9 * per_epoch)  # last epoch at 90%: separate under 0.95, joint under 0.80
    bloom = GPTSamples(ds, n, SampleSettings(seq_length, seed, "bloom", backend=backend))
    doc, sample, shuffle, separate = _bloom_reference(np.asarray(ds.sizes), np.arange(300, dtype=np.int32), n,
                                                      seq_length, seed)
    assert separate and bloom.plan.separate_final_epoch
    for ours, ref in zip((bloom.document_index, bloom.sample_index, bloom.shuffle_index), (doc, sample, shuffle)):
        assert ours.dtype == ref.dtype
        np.testing.assert_array_equal(ours, ref)
    core = GPTSamples(ds, n, SampleSettings(seq_length, seed, "core", backend=backend))
    assert not core.plan.separate_final_epoch
    assert not np.array_equal(core.document_index, bloom.document_index)


def test_plan_epochs_counts():
    plan = plan_epochs(1_000_000, 2048, 1000, "bloom")  # docs/megatron-data.md, "Separate last epoch"
    assert (plan.num_epochs, plan.num_samples_sans_final_epoch, plan.total_samples) == (3, 976, 1464)
    assert plan.separate_final_epoch


def test_bloom_split_syntax_range(prefix):
    ours = GPTSamples(prefix, 100, SampleSettings(16, 1, "bloom"), "0:0.95")
    assert ours.document_range == (0, 285)
    valid = GPTSamples(prefix, 10, SampleSettings(16, 1, "bloom"), "0.95:1.0", "valid")
    assert valid.document_range == (285, 300)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"split": (5, 5)}, "holds no documents"),
        ({"split": "949,50,1", "split_name": "test"}, "holds no documents"),
        ({"seq_length": 0}, "seq_length"),
        ({"num_samples": -1}, "num_samples"),
        ({"compat": "legacy"}, "compat"),
        ({"split_name": "dev"}, "split name"),
        ({"seed": -1}, "seed"),
    ],
)
def test_bad_input_raises(prefix, kwargs, message):
    settings = {"seq_length": 16, "seed": 1,
                **{k: v for k, v in kwargs.items() if k in ("seq_length", "seed", "compat")}}
    rest = {"num_samples": 10, **{k: v for k, v in kwargs.items() if k in ("num_samples", "split", "split_name")}}
    with pytest.raises(BloomstackError, match=message):
        GPTSamples(prefix, settings=SampleSettings(**settings), **rest)


def test_split_without_tokens_raises_instead_of_looping(tmp_path):
    prefix = write_dataset(tmp_path / "holes", num_docs=40, seed=1, empty_every=1)  # every sequence empty
    with pytest.raises(BloomstackError, match="holds no tokens"):
        GPTSamples(prefix, 10, SampleSettings(4, 1), (10, 20))


def test_missing_prefix_names_the_file(tmp_path):
    with pytest.raises(BloomstackError, match="nothing_here.idx"):
        GPTSamples(str(tmp_path / "nothing_here"), 10, SampleSettings(16, 1))
