"""Train/valid/test document ranges: megatron-core's and BigScience's arithmetic, and BLOOM's split syntax.

GPT splits are contiguous ranges of *sequence* ids (docs/megatron-data.md, "Splits").
Three ways to name one, each reproduced exactly because the range feeds every index downstream:

- ``"949,50,1"`` with ``Compat.CORE``: megatron-core's split matrix (normalise with numpy, cumulative
  book-ends, ``int(round(lo * S))``, ``int(round(hi * S))``).
- ``"949,50,1"`` with ``Compat.BLOOM``: the legacy ``get_train_valid_test_split_`` of Megatron-DeepSpeed
  (normalise with Python ``sum``, add ``int(round(w * S))`` per split, shift every boundary by the
  overshoot). The two differ by one sequence for about a quarter of dataset sizes.
- ``"0:0.95"``: BLOOM's per-dataset range, ``[round(START * S), round(END * S))`` with Python's
  round-half-even (``get_split_by_range_``), the same in both modes.

``parse_weighted_split`` reads BLOOM's ``--train-weighted-split-paths`` groups:
``"train: 0.5 0:0.95 PREFIX_A, 0.5 0:0.95 PREFIX_B"``.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from bloomdata.errors import BloomstackError


class Split(StrEnum):
    """The three splits of a dataset, in the order of a ``"949,50,1"`` weight vector."""

    TRAIN = "train"
    VALID = "valid"
    TEST = "test"


class Compat(StrEnum):
    """Whose index arithmetic to reproduce (``data.compat``): the splits, and the sample and blend indices."""

    CORE = "core"  # megatron-core's
    BLOOM = "bloom"  # Megatron-DeepSpeed's, as BLOOM was trained


SPLIT_NAMES = tuple(s.value for s in Split)
COMPAT_MODES = tuple(c.value for c in Compat)


def check_compat(compat: str) -> Compat:
    if compat not in COMPAT_MODES:
        raise BloomstackError(f"compat must be one of {COMPAT_MODES}, got {compat!r}")
    return Compat(compat)


def check_split(split_name: str) -> Split:
    if split_name not in SPLIT_NAMES:
        raise BloomstackError(f"split name must be one of {SPLIT_NAMES}, got {split_name!r}")
    return Split(split_name)


def split_position(split_name: str) -> int:
    """0, 1, 2 for train, valid, test: the weight of ``split_name`` in a ``"949,50,1"`` vector."""
    return SPLIT_NAMES.index(check_split(split_name))


def _split_weights(spec: str, compat: Compat) -> list[float]:
    if "-" in spec:  # megatron-core's regex would silently read "-1" as 1
        raise BloomstackError(f"split {spec!r}: weights must be non-negative numbers like '949,50,1'")
    try:
        if compat == Compat.CORE:
            # megatron-core parse_and_normalize_split: every number in the string, padded to three.
            values = [float(x) for x in re.findall(r"[.0-9]+", spec)]
        else:
            separator = "," if "," in spec else "/" if "/" in spec else None
            values = [float(x) for x in (spec.split(separator) if separator else [spec])]
    except ValueError:
        raise BloomstackError(f"split {spec!r}: expected numbers like '949,50,1'") from None
    if len(values) > 3 and compat == Compat.CORE:
        raise BloomstackError(f"split {spec!r}: at most three weights (train, valid, test)")
    values = (values + [0.0, 0.0, 0.0])[:3]
    bad = [v for v in values if not math.isfinite(v) or v < 0]
    if bad or sum(values) <= 0:
        raise BloomstackError(f"split {spec!r}: weights must be finite, non-negative and not all zero")
    return values


def core_split_matrix(spec: str) -> list[tuple[float, float] | None]:
    """megatron-core's split matrix for ``spec``: (lo, hi) book-ends per split, None for an empty one."""
    weights = _split_weights(spec, Compat.CORE)
    w = np.array(weights, dtype=np.float64)
    normalized = (w / np.sum(w)).tolist()
    expansion = functools.reduce(lambda acc, x: acc + [acc[-1] + x], normalized, [0])
    return [(lo, hi) if hi > lo else None for lo, hi in zip(expansion[:-1], expansion[1:])]


def bloom_split_boundaries(spec: str, num_sequences: int) -> list[int]:
    """The legacy four boundaries [0, a, b, S] of Megatron-DeepSpeed's ``get_train_valid_test_split_``."""
    weights = _split_weights(spec, Compat.BLOOM)
    total = sum(weights)
    weights = [w / total for w in weights]
    bounds = [0]
    for w in weights:
        bounds.append(bounds[-1] + int(round(w * float(num_sequences))))
    overshoot = bounds[-1] - num_sequences
    return [bounds[0]] + [b - overshoot for b in bounds[1:]]


def parse_range(text: str) -> tuple[float, float]:
    """``"0:0.95"`` -> (0.0, 0.95), validated."""
    parts = text.split(":")
    try:
        if len(parts) != 2:
            raise ValueError
        start, end = float(parts[0]), float(parts[1])
    except ValueError:
        raise BloomstackError(f"range {text!r}: expected START:END with 0 <= START < END <= 1, e.g. 0:0.95") from None
    if not (0.0 <= start < end <= 1.0):
        raise BloomstackError(f"range {text!r}: expected 0 <= START < END <= 1")
    return start, end


def range_to_documents(start: float, end: float, num_sequences: int) -> tuple[int, int]:
    # Python round() is round-half-even, as in get_split_by_range_ and megatron-core's builder.
    return int(round(start * num_sequences)), int(round(end * num_sequences))


def split_range(
    split: str | tuple[int, int] | None, split_name: Split, num_sequences: int, compat: Compat = Compat.CORE
) -> tuple[int, int]:
    """The [begin, end) sequence range of ``split_name`` under ``split``.

    ``split`` is None (the whole dataset), an explicit ``(begin, end)``, a ``"START:END"`` fraction range
    or a ``"949,50,1"`` weight vector (read with ``compat``'s arithmetic).
    """
    check_compat(compat)
    position = split_position(split_name)
    if split is None:
        return 0, num_sequences
    if isinstance(split, tuple | list):
        begin, end = (int(x) for x in split)
        if not 0 <= begin <= end <= num_sequences:
            raise BloomstackError(f"document range {split}: outside [0, {num_sequences}]")
        return begin, end
    if ":" in split:
        return range_to_documents(*parse_range(split), num_sequences)
    if compat == Compat.CORE:
        book_end = core_split_matrix(split)[position]
        if book_end is None:
            return 0, 0
        return int(round(book_end[0] * float(num_sequences))), int(round(book_end[1] * float(num_sequences)))
    bounds = bloom_split_boundaries(split, num_sequences)
    return bounds[position], bounds[position + 1]


@dataclass(frozen=True)
class WeightedSplitEntry:
    weight: float
    start: float
    end: float
    prefix: str


@dataclass(frozen=True)
class WeightedSplit:
    name: str
    entries: tuple[WeightedSplitEntry, ...]

    @property
    def prefixes(self) -> list[str]:
        return [e.prefix for e in self.entries]

    @property
    def weights(self) -> list[float]:
        return [e.weight for e in self.entries]


def parse_weighted_split(text: str) -> WeightedSplit:
    """Parse one BLOOM group ``"NAME: W START:END PREFIX, W START:END PREFIX, ..."``."""
    name, colon, body = text.strip().strip("\"'").partition(":")
    name = name.strip()
    if not colon or not name or " " in name:
        raise BloomstackError(
            f"weighted split {text!r}: expected 'NAME: WEIGHT START:END PREFIX, ...', "
            "e.g. 'train: 0.5 0:0.95 data/en, 0.5 0:0.95 data/fr'"
        )
    entries = []
    for item in body.split(","):
        fields = item.split()
        if len(fields) != 3:
            raise BloomstackError(
                f"weighted split {name!r}: entry {item.strip()!r} must be 'WEIGHT START:END PREFIX'"
            )
        try:
            weight = float(fields[0])
        except ValueError:
            raise BloomstackError(f"weighted split {name!r}: weight {fields[0]!r} is not a number") from None
        start, end = parse_range(fields[1])
        entries.append(WeightedSplitEntry(weight, start, end, fields[2]))
    return WeightedSplit(name, tuple(entries))
