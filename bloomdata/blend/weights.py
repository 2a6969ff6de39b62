"""Mixture maths: alpha weights and water-filling, the one copy of each (blends and the tokenizer sample).

Weights follow ``p_i ∝ n_i ** alpha`` over per-language sizes n_i (tokens for a blend, UTF-8 bytes for the
tokenizer's sample): alpha = 1 keeps the natural proportions, alpha = 0 gives every language the same share,
and values in between (BLOOM-style multilingual blends and BLOOM's tokenizer used 0.3) up-sample small
languages without drowning the large ones.

``water_fill`` shares a total among names in proportion to their weights, each clamped to ``[lo, hi]``:
clamp the violators, share what is left among the rest, repeat until nothing moves (at most one pass per
name), so the result sums to the total exactly up to rounding. The units are the caller's:

- a blend (``constrain``): manual overrides fix some weights outright (fractions of the whole blend), and the
  remaining mass goes to the others in proportion to ``p_i``, each within ``[floor, cap]``;
- the tokenizer sample (``bloomdata.tokenizer.sampling.byte_quotas``): a budget of bytes, each language's
  quota capped at its size, so a language smaller than its share gives all it has and its excess goes to
  the others in proportion to their ``p``.

For a token budget B, blend language i is drawn ``w_i * B`` tokens, i.e. ``w_i * B / n_i`` effective epochs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from bloomdata.errors import BloomstackError


def alpha_weights(sizes: Mapping[str, int], alpha: float) -> dict[str, float]:
    """p_i ∝ n_i ** alpha, normalised; languages with no data are an error (they cannot be drawn)."""
    if not math.isfinite(alpha) or alpha < 0:
        raise BloomstackError(f"alpha must be a finite number >= 0, got {alpha}")
    empty = [name for name, n in sizes.items() if n <= 0]
    if empty:
        raise BloomstackError(f"dataset(s) {', '.join(empty)} hold no tokens; drop them from the blend")
    if not sizes:
        raise BloomstackError("no datasets to blend")
    raw = {name: float(n) ** alpha for name, n in sizes.items()}
    total = sum(raw.values())
    return {name: w / total for name, w in raw.items()}


def water_fill(weights: Mapping[str, float], total: float, lo: Mapping[str, float] | None = None,
               hi: Mapping[str, float] | None = None) -> dict[str, float]:
    """``total`` shared in proportion to ``weights``, each share clamped to ``[lo, hi]`` (see module docstring).

    A clamped share is exactly its bound (an int bound stays an int: the tokenizer's byte quotas rely on it).
    The caller checks feasibility (``sum(lo) <= total <= sum(hi)``); when the bounds cannot be met the
    result does not sum to ``total``.
    """
    names = list(weights)
    lo = {n: (lo or {}).get(n, 0.0) for n in names}
    hi = {n: (hi or {}).get(n, math.inf) for n in names}
    fixed: dict[str, float] = {}
    for _ in range(len(names) + 1):
        open_ = [n for n in names if n not in fixed]
        if not open_:
            break
        left = total - sum(fixed.values())
        share = sum(weights[n] for n in open_)
        trial = {n: (left * weights[n] / share if share > 0 else left / len(open_)) for n in open_}
        low = {n: lo[n] for n, w in trial.items() if w < lo[n]}
        high = {n: hi[n] for n, w in trial.items() if w >= hi[n]}
        if not low and not high:
            fixed.update(trial)
            break
        # clamp the side that is further out of bounds first; the other side may resolve itself
        excess_low = sum(lo[n] - trial[n] for n in low)
        excess_high = sum(trial[n] - hi[n] for n in high)
        fixed.update(low if low and excess_low >= excess_high else high)
    return {n: fixed[n] for n in names}


def _bound(value: float | Mapping[str, float] | None, name: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, Mapping):
        return float(value.get(name, default))
    return float(value)


def constrain(
    base: Mapping[str, float],
    floor: float | Mapping[str, float] | None = None,
    cap: float | Mapping[str, float] | None = None,
    overrides: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Blend weights: overrides fixed, the rest water-filled within [floor, cap] (see module docstring)."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(base))
    if unknown:
        raise BloomstackError(f"override for unknown dataset(s) {', '.join(unknown)}; known: {', '.join(base)}")
    for name, w in overrides.items():
        if not math.isfinite(w) or not 0 <= w <= 1:
            raise BloomstackError(f"override weight {w} of {name} must be in [0, 1]")
    free = [name for name in base if name not in overrides]
    mass = 1.0 - sum(overrides.values())
    if mass < -1e-12 or (not free and abs(mass) > 1e-9):
        raise BloomstackError(f"overrides sum to {sum(overrides.values()):.6g}; they must leave room for the rest "
                              "(sum < 1), or cover every dataset and sum to 1")
    lo = {n: _bound(floor, n, 0.0) for n in free}
    hi = {n: _bound(cap, n, 1.0) for n in free}
    for n in free:
        if not 0 <= lo[n] <= hi[n] <= 1:
            raise BloomstackError(f"{n}: need 0 <= floor ({lo[n]}) <= cap ({hi[n]}) <= 1")
    if free and (sum(lo.values()) > mass + 1e-12 or sum(hi.values()) < mass - 1e-12):
        raise BloomstackError(
            f"floors sum to {sum(lo.values()):.4g} and caps to {sum(hi.values()):.4g}, but the free datasets "
            f"must share {mass:.4g}: lower the floor or raise the cap"
        )
    weights = {**overrides, **water_fill({n: base[n] for n in free}, mass, lo, hi)}
    total = sum(weights.values())
    if free and abs(total - 1.0) > 1e-9:
        raise BloomstackError(f"floors/caps cannot be met together (weights sum to {total:.6g}); relax them")
    return {name: weights[name] for name in base}
