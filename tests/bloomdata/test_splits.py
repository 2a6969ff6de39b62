"""Split arithmetic: megatron-core's split matrix, BigScience's legacy boundaries, BLOOM's range syntax."""

from __future__ import annotations

import pytest

from bloomdata.errors import BloomstackError
from bloomdata.megatron.splits import (
    bloom_split_boundaries,
    parse_weighted_split,
    split_range,
)


@pytest.mark.parametrize("spec", ["949,50,1", "969, 30, 1", "98,2", "1", "90/5/5", "0.7,0.2,0.1"])
def test_core_ranges_equal_megatron(spec):
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )

    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(spec))
    for size in list(range(1, 400)) + [23_931, 1_000_003]:
        for i, name in enumerate(("train", "valid", "test")):
            expected = ((0, 0) if matrix[i] is None
                        else (int(round(matrix[i][0] * size)), int(round(matrix[i][1] * size))))
            assert split_range(spec, name, size, "core") == expected, (spec, size, name)


def test_legacy_and_core_differ_by_one_sequence():
    # docs/megatron-data.md, '"949,50,1" in both modes': S = 23,931 with 949,50,1
    assert bloom_split_boundaries("949,50,1", 23_931) == [0, 22_710, 23_907, 23_931]
    assert split_range("949,50,1", "train", 23_931, "bloom") == (0, 22_710)
    assert split_range("949,50,1", "train", 23_931, "core") == (0, 22_711)
    assert split_range("949,50,1", "valid", 23_931, "core") == (22_711, 23_907)


def test_legacy_boundaries_always_cover_the_dataset():
    for size in range(1, 3000):
        bounds = bloom_split_boundaries("949,50,1", size)
        assert bounds[0] == 0 and bounds[-1] == size and bounds == sorted(bounds)


def test_ranges_round_half_even():
    assert split_range("0:0.95", "train", 10, "bloom") == (0, 10)  # round(9.5) == 10
    assert split_range("0.95:1.0", "valid", 10, "bloom") == (10, 10)
    assert split_range("0:0.5", "train", 5, "core") == (0, 2)  # round(2.5) == 2
    assert split_range((3, 7), "test", 10) == (3, 7)
    assert split_range(None, "train", 10) == (0, 10)


def test_weighted_split_syntax():
    group = parse_weighted_split('"train: 0.5 0:0.95 data/en, 0.25 0:0.95 data/fr, 0.25 0.1:0.9 data/ar"')
    assert group.name == "train"
    assert group.prefixes == ["data/en", "data/fr", "data/ar"]
    assert group.weights == [0.5, 0.25, 0.25]
    assert (group.entries[2].start, group.entries[2].end) == (0.1, 0.9)


@pytest.mark.parametrize(
    "text, message",
    [
        ("0.5 0:0.95 data/en", "NAME"),
        ("train: 0.5 data/en", "WEIGHT START:END PREFIX"),
        ("train: x 0:0.95 data/en", "not a number"),
        ("train: 0.5 0.9:0.1 data/en", "START < END"),
        ("train: 0.5 0:1.5 data/en", "START < END"),
    ],
)
def test_weighted_split_errors(text, message):
    with pytest.raises(BloomstackError, match=message):
        parse_weighted_split(text)


@pytest.mark.parametrize("spec", ["a,b", "-1,2,3", "0,0,0", "1,2,3,4"])
def test_bad_split_specs(spec):
    with pytest.raises(BloomstackError, match="split"):
        split_range(spec, "train", 100, "core")
