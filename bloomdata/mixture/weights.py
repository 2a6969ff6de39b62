"""Blend-weight maths (alpha sampling with floors, caps and overrides) and the blend YAML schema.

Weights follow ``p_i ∝ n_i ** alpha`` over per-language token counts n_i: alpha = 1 keeps the natural
proportions, alpha = 0 gives every language the same share, and values in between (BLOOM-style
multilingual blends use about 0.3) up-sample small languages. Then, in order:

1. manual overrides fix some languages' weights outright (fractions of the whole blend);
2. the remaining mass goes to the other languages in proportion to ``p_i``, with each clamped to
   ``[floor, cap]`` by water-filling: clamp the violators, share what is left among the rest, repeat
   until nothing moves (at most one pass per language), so the result sums to 1 exactly up to rounding.

For a token budget B, language i is drawn ``w_i * B`` tokens, i.e. ``w_i * B / n_i`` effective epochs.
A language repeated many times is a known over-fitting risk, hence the ``max_epochs`` warning.

``BlendSpec`` is the YAML contract between ``bloomdata blend`` and its consumers (the trainer and the
flows): a mapping with optional ``seq_length``/``seed``, the ``token_budget`` and ``alpha`` it was tuned
for, a ``split`` spec (``"949,50,1"``) or BLOOM per-dataset ``train_range``/``valid_range``, and
``datasets: [{name, prefix, weight, tokens, tokens_drawn, epochs}]``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import yaml
from pydantic import BaseModel, ConfigDict, Field

from bloomdata.config import load_yaml, validate
from bloomdata.errors import BloomstackError


def alpha_weights(tokens: Mapping[str, int], alpha: float) -> dict[str, float]:
    """p_i ∝ n_i ** alpha, normalised; languages with no tokens are an error (they cannot be drawn)."""
    if not math.isfinite(alpha) or alpha < 0:
        raise BloomstackError(f"alpha must be a finite number >= 0, got {alpha}")
    empty = [name for name, n in tokens.items() if n <= 0]
    if empty:
        raise BloomstackError(f"dataset(s) {', '.join(empty)} hold no tokens; drop them from the blend")
    if not tokens:
        raise BloomstackError("no datasets to blend")
    raw = {name: float(n) ** alpha for name, n in tokens.items()}
    total = sum(raw.values())
    return {name: w / total for name, w in raw.items()}


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
    """Apply overrides, then clamp the rest to [floor, cap] by water-filling (see module docstring)."""
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
    weights = dict(overrides)
    fixed: dict[str, float] = {}
    for _ in range(len(free) + 1):
        open_ = [n for n in free if n not in fixed]
        left = mass - sum(fixed.values())
        share = sum(base[n] for n in open_)
        trial = {n: (left * base[n] / share if share > 0 else left / len(open_)) for n in open_}
        low = {n: lo[n] for n, w in trial.items() if w < lo[n]}
        high = {n: hi[n] for n, w in trial.items() if w > hi[n]}
        if not low and not high:
            fixed.update(trial)
            break
        # clamp the side that is further out of bounds first; the other side may resolve itself
        excess_low = sum(lo[n] - trial[n] for n in low)
        excess_high = sum(trial[n] - hi[n] for n in high)
        fixed.update(low if excess_low >= excess_high else high)
    weights.update(fixed)
    total = sum(weights.values())
    if free and abs(total - 1.0) > 1e-9:
        raise BloomstackError(f"floors/caps cannot be met together (weights sum to {total:.6g}); relax them")
    return {name: weights[name] for name in base}


class BlendDataset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="language or source name")
    prefix: str = Field(description="Megatron dataset prefix (PREFIX.bin/.idx)")
    weight: float = Field(gt=0, description="fraction of the blend's samples, sums to 1 over datasets")
    tokens: int | None = Field(default=None, description="tokens available (train range) when tuned")
    tokens_drawn: int | None = Field(default=None, description="weight * token_budget")
    epochs: float | None = Field(default=None, description="tokens_drawn / tokens")


class BlendSpec(BaseModel):
    """The blend YAML: what to draw from, in which proportions, with which split."""

    model_config = ConfigDict(extra="forbid")

    seq_length: int | None = Field(default=None, ge=1)
    seed: int | None = Field(default=None, ge=0)
    token_budget: int | None = Field(default=None, ge=1)
    alpha: float | None = None
    split: str | None = Field(default=None, description="'949,50,1'-style spec shared by every dataset")
    train_range: str | None = Field(default=None, description="BLOOM per-dataset range, e.g. '0:0.95'")
    valid_range: str | None = Field(default=None, description="BLOOM per-dataset range, e.g. '0.95:1.0'")
    datasets: list[BlendDataset]

    @property
    def prefixes(self) -> list[str]:
        return [d.prefix for d in self.datasets]

    @property
    def weights(self) -> list[float]:
        return [d.weight for d in self.datasets]

    def weighted_split(self, group: str = "train") -> str:
        """BLOOM's ``--train-weighted-split-paths`` string for this blend."""
        rng = self.train_range if group.startswith("train") else self.valid_range
        if rng is None:
            raise BloomstackError(f"blend has no {group} range; set train_range/valid_range (e.g. 0:0.95)")
        return f"{group}: " + ", ".join(f"{d.weight!r} {rng} {d.prefix}" for d in self.datasets)

    def to_yaml(self) -> str:
        header = "# Blend for bloomtrain / flows; written by `bloomdata blend` (schema: bloomdata.blend_weights)\n"
        return header + yaml.safe_dump(self.model_dump(exclude_none=True), sort_keys=False)


def load_blend_spec(path: str) -> BlendSpec:
    return validate(BlendSpec, load_yaml(path), f"{path}: invalid blend")
