"""The search space: the datasets, the prior, the bounds, and the mixtures drawn around the prior.

A mixture is a weight per dataset (a point of the simplex). Every mixture of a search, the proxies', the
candidates' and the proposal, lies within the bounds ``lo <= w <= hi``: ``lo`` is the floor, ``hi`` the
smaller of the cap and, with a final token budget B, ``max_epochs x tokens / B`` (a dataset drawn
``w x B`` tokens is repeated ``w x B / tokens`` times). A draw outside them is moved inside by
``bloomdata.blend.weights.water_fill`` (the blend's own clamp-and-share rule), so the regression is fitted
where the proposal is searched.

Draws follow RegMix (sail-sg/regmix, mixture_config/synthesize_mixture.py): ``Dirichlet(C x center)`` with a
concentration C drawn log-uniformly per mixture (1 to 30 by default), so some mixtures stay near the center and
some stray far from it, a small C putting most of the weight on a few datasets. The center is the prior, or
``prior ** T`` renormalized with a temperature T < 1, as RegMix smooths a skewed prior. Wide draws are what
make a few proxies informative: the datasets a mixture starves show in its bits per byte far above the noise
of a proxy, so the fit learns each dataset's response to its share (on the demo corpus, drawing near the
center instead, C = 10 to 100 around prior ** 0.5, left the held-out Spearman of every regressor below 0.8).
Weights below ``MIN_WEIGHT`` become 0, as RegMix rounds tiny ones away. The prior itself is always the first
mixture. Draws depend only on the seed and their position: mixture k is the same for any number of proxies,
so a search with more proxies reuses the earlier ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from bloomdata.blend.spec import BlendSpec
from bloomdata.blend.tune import BlendConfig, tune_blend
from bloomdata.blend.weights import constrain
from bloomdata.errors import BloomstackError
from bloomtrain.mixture_search.config import MixtureSearchConfig

MIN_WEIGHT = 1e-4  # smaller drawn weights become 0
PROXY_STREAM, CANDIDATE_STREAM = 0, 1  # numpy seed sequences (seed, stream): proxies and candidates differ


@dataclass(frozen=True)
class SearchSpace:
    """The datasets in blend order, their training tokens, the prior and the bounds (arrays over ``names``)."""

    names: list[str]
    prefixes: dict[str, str]
    tokens: dict[str, int]
    prior: np.ndarray  # the prior within the bounds, [d]
    center: np.ndarray  # where mixtures are drawn around: prior ** temperature, renormalized, [d]
    lo: np.ndarray  # [d]
    hi: np.ndarray  # [d]
    prior_source: str  # "tokens ** 0.3" or the mixture file
    spec: BlendSpec  # the prior as a blend (split, ranges, rows), the template of the proposal's blend.yaml

    def weights(self, w: np.ndarray) -> dict[str, float]:
        return {n: float(x) for n, x in zip(self.names, w)}

    def vector(self, weights: dict[str, float]) -> np.ndarray:
        return np.array([weights.get(n, 0.0) for n in self.names], dtype=np.float64)

    def epochs(self, w: np.ndarray, budget: int) -> np.ndarray:
        return w * budget / np.array([self.tokens[n] for n in self.names], dtype=np.float64)


def _bound(value: float | dict[str, float] | None, name: str, default: float) -> float:
    if value is None:
        return default
    return float(value.get(name, default)) if isinstance(value, dict) else float(value)


def search_space(config: MixtureSearchConfig) -> SearchSpace:
    """The datasets of ``config`` with their prior (``bloomdata.blend.tune.tune_blend``) and bounds."""
    spec = tune_blend(BlendConfig(
        datasets=config.datasets, datasets_dir=config.datasets_dir,
        token_budget=config.token_budget or config.proxy_tokens, alpha=config.prior_alpha,
        mixture=config.prior_mixture, split=config.split, train_range=config.train_range,
        valid_range=config.valid_range, compat=config.compat, out_dir=config.out_dir))
    if spec.unmatched:
        raise BloomstackError(f"prior_mixture {config.prior_mixture}: no group for dataset(s) "
                              f"{', '.join(spec.unmatched)}, so they have no prior weight; drop them or use "
                              "prior_alpha", keys=["prior_mixture", "prior_alpha"])
    names = [d.name for d in spec.datasets]
    tokens = {d.name: int(d.tokens or 0) for d in spec.datasets}
    lo = np.array([_bound(config.floor, n, 0.0) for n in names])
    hi = np.array([_bound(config.cap, n, 1.0) for n in names])
    if config.token_budget is not None:
        hi = np.minimum(hi, [config.max_epochs * tokens[n] / config.token_budget for n in names])
        if hi.sum() < 1.0 - 1e-9:
            raise BloomstackError(
                f"token budget {config.token_budget:,} (token_budget) with at most {config.max_epochs:g} epochs per "
                f"dataset (max_epochs): the datasets hold {sum(tokens.values()):,} training tokens, so even every one "
                f"at its cap covers only {hi.sum():.1%} of the budget; lower the budget, raise max epochs or the cap, "
                "or add data", keys=["token_budget", "max_epochs"])
    prior = constrain({d.name: d.weight for d in spec.datasets}, dict(zip(names, lo)), dict(zip(names, hi)))
    source = config.prior_mixture or f"tokens ** {config.prior_alpha:g}"
    vector = np.array([prior[n] for n in names])
    center = vector ** config.temperature
    return SearchSpace(names=names, prefixes={d.name: d.prefix for d in spec.datasets}, tokens=tokens,
                       prior=vector, center=center / center.sum(), lo=lo, hi=hi, prior_source=source, spec=spec)


def within_bounds(w: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Each row of ``w`` [n, d] (weights >= 0, any sum) moved onto the simplex within ``[lo, hi]``: the rule of
    ``bloomdata.blend.weights.water_fill`` (share 1 in proportion to the weights, clamp the side further out
    of bounds, share the rest again), for all rows at once. Assumes ``sum(lo) <= 1 <= sum(hi)``."""
    n, d = w.shape
    value = np.zeros_like(w, dtype=np.float64)
    fixed = np.zeros((n, d), dtype=bool)
    open_rows = np.ones(n, dtype=bool)
    for _ in range(d + 1):
        if not open_rows.any():
            break
        free = ~fixed
        left = 1.0 - np.where(fixed, value, 0.0).sum(1, keepdims=True)
        share = np.where(free, w, 0.0).sum(1, keepdims=True)
        even = left / np.maximum(free.sum(1, keepdims=True), 1)
        trial = np.where(free, np.where(share > 0, w * left / np.where(share > 0, share, 1.0), even), value)
        low, high = free & (trial < lo), free & (trial >= hi)
        settled = open_rows & ~(low | high).any(1)
        value[settled] = trial[settled]
        open_rows &= ~settled
        # clamp the side further out of bounds first (water_fill's rule); the other may resolve itself
        take_low = low.any(1) & (np.where(low, lo - trial, 0.0).sum(1) >= np.where(high, trial - hi, 0.0).sum(1))
        clamp = np.where(take_low[:, None], low, high) & open_rows[:, None]
        value = np.where(clamp, np.where(take_low[:, None], lo, hi), value)
        fixed |= clamp
        open_rows &= ~fixed.all(1)
    return value


def _dirichlet(rng: np.random.Generator, center: np.ndarray, n: int, concentration: tuple[float, float]) -> np.ndarray:
    """[n, d] draws of Dirichlet(C x center), C log-uniform in ``concentration``, tiny weights set to 0."""
    c = np.exp(rng.uniform(math.log(concentration[0]), math.log(concentration[1]), size=(n, 1)))
    # Dirichlet via normalized Gammas (numpy's dirichlet takes one alpha for all rows); a tiny shape may
    # underflow to 0 for every dataset: such a draw falls back to the center
    g = rng.standard_gamma(c * center[None, :])
    total = g.sum(1, keepdims=True)
    w = np.where(total > 0, g / np.where(total > 0, total, 1.0), center[None, :])
    w[w < MIN_WEIGHT] = 0.0
    return w


def proxy_mixtures(space: SearchSpace, k: int, seed: int, concentration: tuple[float, float]) -> np.ndarray:
    """The search's ``k`` mixtures [k, d]: the prior, then ``k - 1`` draws; draw j depends only on (seed, j),
    so a search with more proxies keeps the mixtures of one with fewer."""
    draws = [_dirichlet(np.random.default_rng((seed, PROXY_STREAM, j)), space.center, 1, concentration)
             for j in range(k - 1)]
    return np.vstack([space.prior[None, :], *(within_bounds(w, space.lo, space.hi) for w in draws)])


def candidate_mixtures(space: SearchSpace, n: int, seed: int, concentration: tuple[float, float]) -> np.ndarray:
    """``n`` candidate mixtures [n, d] for the proposal, drawn as the proxies' are (another random stream)."""
    w = _dirichlet(np.random.default_rng((seed, CANDIDATE_STREAM)), space.center, n, concentration)
    return within_bounds(w, space.lo, space.hi)
