"""Sizes and counts as people write them (``50MB``, ``1GiB``, ``350e9``), for config fields and flags.

Used as ``Annotated[int, BeforeValidator(parse_bytes)]`` so a YAML file, a flag and a Prefect parameter all
accept the same spellings, and a bad one is a validation error naming the field.
"""

from __future__ import annotations

import math
import re
from typing import Any

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20,
          "gib": 2**30, "tib": 2**40}


def parse_bytes(value: Any) -> Any:
    """'500MB' -> 500_000_000 (decimal units; KiB/MiB/GiB are binary); other types pass to the int check."""
    if not isinstance(value, str):
        return value
    match = re.fullmatch(r"\s*([0-9_.]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", value)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"not a byte size: {value!r} (examples: 5000000, 50MB, 1GiB)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_count(value: Any) -> Any:
    """'350e9' or 3.5e11 -> 350_000_000_000: a count written in scientific notation."""
    if isinstance(value, bool) or not isinstance(value, str | float):
        return value
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"expected a count such as 350e9, got {value!r}") from None
    if not math.isfinite(number) or number != int(number):
        raise ValueError(f"expected a whole count such as 350e9, got {value!r}")
    return int(number)
