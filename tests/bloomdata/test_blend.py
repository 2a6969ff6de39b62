"""Blend and build_blend against megatron-core 0.16.1's BlendedMegatronDatasetBuilder / BlendedDataset."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bloomdata.errors import BloomstackError
from bloomdata.megatron import index_builders
from bloomdata.megatron.blend import Blend, blend_from_weighted_split, build_blend, samples_per_dataset
from bloomdata.megatron.gpt_samples import GPTSamples, SampleSettings
from tests.bloomdata.megatron_oracle import blended_build, megatron_tokens, write_dataset

BACKENDS = ["numpy"] + (["cpp"] if index_builders.cpp_available() else [])


@pytest.fixture(scope="module")
def prefixes(tmp_path_factory):
    root = tmp_path_factory.mktemp("blend")
    return [write_dataset(root / f"lang{k}", num_docs=150 + 60 * k, seed=k, max_len=60) for k in range(3)]


@pytest.mark.parametrize(
    "weights, sizes, seed, seq_length, split",
    [
        ([0.3, 0.5, 0.2], [500, 40, 20], 7, 24, "90,7,3"),
        ([2.0, 1.0, 1.0], [3000, 100, 30], 1234, 10, "80,15,5"),  # many epochs of the small datasets
    ],
)
def test_build_blend_equals_megatron_builder(prefixes, weights, sizes, seed, seq_length, split):
    theirs = blended_build(prefixes, weights, sizes, seed, seq_length, split)
    for i, name in enumerate(("train", "valid", "test")):
        for backend in BACKENDS:
            ours = build_blend(prefixes, weights, sizes[i], SampleSettings(seq_length, seed, "core", backend=backend),
                               split, name)
            ref = theirs[i]
            assert ours.dataset_index.dtype == ref.dataset_index.dtype == np.int16
            np.testing.assert_array_equal(ours.dataset_index, ref.dataset_index)
            np.testing.assert_array_equal(ours.dataset_sample_index, ref.dataset_sample_index)
            assert len(ours) == len(ref)
            for component, ref_component in zip(ours.samples, ref.datasets):
                assert component.num_samples == ref_component.num_samples  # 0.5% surplus, as the builder
                np.testing.assert_array_equal(component.shuffle_index, ref_component.shuffle_index)
        for j in (0, 1, len(ours) - 1):
            np.testing.assert_array_equal(ours[j], megatron_tokens(ref.datasets[ref.dataset_index[j]],
                                                                   ref.dataset_sample_index[j]))


def test_blend_class_equals_blended_dataset_directly(prefixes):
    from megatron.core.datasets.blended_dataset import BlendedDataset

    from tests.bloomdata.megatron_oracle import gpt_config, gpt_dataset

    comps = [gpt_dataset(p, 0, 100, 300, 5, 16) for p in prefixes]
    theirs = BlendedDataset(comps, [5.0, 3.0, 2.0], 700, gpt_config(5, 16, split="1"))
    ours = Blend([GPTSamples(p, 300, SampleSettings(16, 5), (0, 100)) for p in prefixes], [5.0, 3.0, 2.0], 700)
    np.testing.assert_array_equal(ours.dataset_index, theirs.dataset_index)
    np.testing.assert_array_equal(ours.dataset_sample_index, theirs.dataset_sample_index)


def test_samples_per_dataset_core_equals_builder():
    from megatron.core.datasets.blended_megatron_dataset_builder import _get_size_per_split_per_dataset
    from megatron.core.datasets.utils import normalize

    weights = list(np.random.default_rng(0).dirichlet(np.ones(28)))
    for n in (1, 999, 220_000_000):
        targets, to_build = samples_per_dataset(weights, n, "core")
        w = normalize(weights)
        assert targets == [x[0] for x in _get_size_per_split_per_dataset(w, [n])]
        assert to_build == [x[0] for x in _get_size_per_split_per_dataset(w, [n], surplus=0.005)]


def test_samples_per_dataset_bloom_formula():
    weights = [0.2204, 0.1207, 0.1304, 0.1297, 0.3988]
    _, to_build = samples_per_dataset(weights, 220_000_000, "bloom")
    total = sum(weights)
    assert to_build == [int(math.ceil(220_000_000 * (w / total) * 1.005)) for w in weights]


def test_bloom_blend_from_weighted_split(prefixes):
    text = f"train: 0.5 0:0.95 {prefixes[0]}, 0.3 0:0.95 {prefixes[1]}, 0.2 0:0.95 {prefixes[2]}"
    blend = blend_from_weighted_split(text, 400, SampleSettings(16, 42, "bloom"))
    assert blend.dataset_index.dtype == np.uint8
    assert len(blend) == sum(len(s) for s in blend.samples)  # BigScience: full lengths of the components
    assert [s.num_samples for s in blend.samples] == [math.ceil(400 * w * 1.005) for w in (0.5, 0.3, 0.2)]
    assert [s.document_range for s in blend.samples] == [(0, round(0.95 * n)) for n in (150, 210, 270)]
    counts = np.bincount(blend.dataset_index[:400], minlength=3)
    assert np.all(np.abs(counts - np.array([200, 120, 80])) <= 1)
    assert len(blend[399]) == 17


def test_oversampling_is_an_error(prefixes):
    small = [GPTSamples(p, 10, SampleSettings(16, 1), (0, 20)) for p in prefixes]
    with pytest.raises(BloomstackError, match="asks .* for"):
        Blend(small, [0.98, 0.01, 0.01], 10_000)


@pytest.mark.parametrize(
    "weights, message",
    [
        ([0.5, -0.5, 1.0], "finite number >= 0"),
        ([0.5, float("nan"), 1.0], "finite number >= 0"),
        ([0.0, 0.0, 0.0], "all zero"),
        ([1.0, 0.0, 1.0], "is 0"),
        ([1.0, 1.0], "one weight per"),
    ],
)
def test_bad_weights_name_the_culprit(prefixes, weights, message):
    with pytest.raises(BloomstackError, match=message):
        build_blend(prefixes, weights, 100, SampleSettings(16, 1), "90,7,3")


def test_mixed_dtypes_and_missing_prefix(prefixes, tmp_path):
    wide = write_dataset(tmp_path / "wide", num_docs=100, dtype=np.int32)
    with pytest.raises(BloomstackError, match="share one token dtype"):
        build_blend([prefixes[0], wide], [1, 1], 100, SampleSettings(16, 1), "90,7,3")
    with pytest.raises(BloomstackError, match="missing_lang.idx"):
        build_blend([prefixes[0], str(tmp_path / "missing_lang")], [1, 1], 100, SampleSettings(16, 1), "90,7,3")


def test_one_builder_makes_every_split_from_one_config_as_megatron_core(prefixes, tmp_path):
    """``DataSplits``: train and valid from one ``SplitsConfig``, equal to megatron-core's
    BlendedMegatronDatasetBuilder; the seed is the config's (required) unless the blend YAML names its own; the
    blending rule is the one ``greedy_counts`` counts."""
    from bloomdata.blend.spec import BlendDataset, BlendSpec
    from bloomdata.megatron.blend import greedy_counts
    from bloomdata.megatron.builder import DataSplits, SplitsConfig

    weights, sizes = [0.3, 0.5, 0.2], [500, 40, 20]
    datasets = [BlendDataset(name=f"l{k}", prefix=p, weight=w) for k, (p, w) in enumerate(zip(prefixes, weights))]
    for seed_in_yaml, seed in ((None, 7), (11, 11)):
        path = tmp_path / f"blend-{seed}.yaml"
        path.write_text(BlendSpec(seq_length=24, seed=seed_in_yaml, split="90,7,3", datasets=datasets).to_yaml())
        splits = DataSplits(SplitsConfig(seq_length=24, seed=7, blend=str(path)))
        theirs = blended_build(prefixes, weights, sizes, seed, 24, "90,7,3")
        for name, size, ref in (("train", sizes[0], theirs[0]), ("valid", sizes[1], theirs[1])):
            ours = splits.split(name, size)
            assert ours is not None
            np.testing.assert_array_equal(ours.dataset_index, ref.dataset_index)
            np.testing.assert_array_equal(ours.dataset_sample_index, ref.dataset_sample_index)
            for component, ref_component in zip(ours.samples, ref.datasets):
                np.testing.assert_array_equal(component.shuffle_index, ref_component.shuffle_index)
        assert greedy_counts(weights, sizes[0]) == np.bincount(theirs[0].dataset_index, minlength=3).tolist()
    with pytest.raises(TypeError, match="seed"):
        SplitsConfig(seq_length=24, blend=str(path))  # type: ignore[call-arg]  # no default seed
    with pytest.raises(BloomstackError, match="blend seq_length 24 != model.seq_length 32"):
        DataSplits(SplitsConfig(seq_length=32, seed=7, blend=str(path))).split("train", 10)
    no_valid = tmp_path / "no-valid.yaml"
    no_valid.write_text(BlendSpec(seq_length=24, split="100,0,0", datasets=datasets).to_yaml())
    assert DataSplits(SplitsConfig(seq_length=24, seed=7, blend=str(no_valid))).split("valid", 8) is None
