"""The search space: the datasets, the prior, the epoch-aware bounds, and the mixtures the search tries.

A mixture is a weight per dataset (a point of the simplex). Every mixture of a search, the proxies', the
candidates' and the proposal, lies within the bounds ``lo <= w <= hi``: ``lo`` is the floor, ``hi`` the
smaller of the cap and ``max_epochs x tokens / B`` (default 4 epochs, after Muennighoff et al. 2023, "Scaling
Data-Constrained Language Models": repeated tokens are worth about as much as new ones up to ~4 epochs and
quickly less after), where B is the final token budget, or without one the proxies' own tokens: a dataset
drawn ``w x B`` tokens is repeated ``w x B / tokens`` times. A small dataset given much weight is trained on
many times over and overfits; its cap keeps every mixture out of that region. Bounds that leave no mixture
(the caps sum below 1: too little data for the budget) are a one-line error naming the largest budget and
the fewest epochs that fit.

The proxies' mixtures are the prior, then a space-filling design of the bounded region: ``POOL`` mixtures
uniform within the bounds (hit-and-run, ``uniform_in_bounds``), of which ``k - 1`` are picked by kernel herding
(``herd``): each pick where the region is and the picks so far are not, distances in units of each dataset's
range, so every dataset's weight is tried from its floor to near its cap, and few proxies put most weight on
one dataset. RegMix's draws (sail-sg/regmix, ``Dirichlet(C x prior)`` with C log-uniform in 1-30) did neither:
on the issue's skewed set (en 27k tokens, five languages of 3-5k) three of eight put over 76% on en and none
explored the small languages near their cap. The pool depends only on the seed, and herding is greedy, so a
search with more proxies keeps the mixtures of one with fewer. The candidates scored by the fit are half
uniform within the bounds, half RegMix's draws around ``prior ** T`` (renormalized; ``temperature``) moved within
the bounds by ``bloomdata.blend.weights.water_fill``'s clamp-and-share rule (``within_bounds``).
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
POOL = 2048  # mixtures uniform within the bounds that the proxies' design picks from
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
    budget: int  # the tokens the epoch caps are counted at: the final budget, else the proxies' tokens

    def weights(self, w: np.ndarray) -> dict[str, float]:
        return {n: float(x) for n, x in zip(self.names, w)}

    def vector(self, weights: dict[str, float]) -> np.ndarray:
        return np.array([weights.get(n, 0.0) for n in self.names], dtype=np.float64)

    def epochs(self, w: np.ndarray, budget: int | None = None) -> np.ndarray:
        """Repetitions of each dataset when ``w`` [..., d] is drawn ``budget`` tokens (default: the bounds')."""
        tokens = np.array([max(self.tokens[n], 1) for n in self.names], dtype=np.float64)
        return w * (self.budget if budget is None else budget) / tokens


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
    budget = config.token_budget or config.proxy_tokens
    hi = np.minimum([_bound(config.cap, n, 1.0) for n in names],
                    [config.max_epochs * tokens[n] / budget for n in names])
    if hi.sum() < 1.0 - 1e-9:
        raise BloomstackError(_infeasible(config, tokens, budget, float(hi.sum())),
                              keys=["token_budget", "max_epochs", "proxy_tokens"])
    prior = constrain({d.name: d.weight for d in spec.datasets}, dict(zip(names, lo)), dict(zip(names, hi)))
    source = config.prior_mixture or f"tokens ** {config.prior_alpha:g}"
    vector = np.array([prior[n] for n in names])
    center = vector ** config.temperature
    return SearchSpace(names=names, prefixes={d.name: d.prefix for d in spec.datasets}, tokens=tokens,
                       prior=vector, center=center / center.sum(), lo=lo, hi=hi, prior_source=source, spec=spec,
                       budget=budget)


def _infeasible(config: MixtureSearchConfig, tokens: dict[str, int], budget: int, covered: float) -> str:
    """Why the epoch caps (and caps) leave no mixture, with the largest budget and the fewest epochs that fit."""
    total = sum(tokens.values())
    what = (f"token budget {budget:,} (token_budget)" if config.token_budget else
            f"{budget:,} tokens per proxy (proxy_tokens; no token_budget, so the epochs are counted at the proxies')")
    fix = ("lower the budget" if config.token_budget
           else f"lower proxy_tokens to {int(config.max_epochs * total):,} or less")
    return (f"{what} with at most {config.max_epochs:g} epochs per dataset (max_epochs): the datasets hold "
            f"{total:,} training tokens, so even every one at its cap covers only {covered:.1%} of the budget; "
            f"{fix}, raise max_epochs to {budget / max(total, 1):.3g} or more (or the cap), or add data")


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


def uniform_in_bounds(rng: np.random.Generator, start: np.ndarray, lo: np.ndarray, hi: np.ndarray, n: int,
                      chains: int = 256) -> np.ndarray:
    """``n`` mixtures [n, d] spread uniformly over the bounded simplex ``{sum w = 1, lo <= w <= hi}`` by
    hit-and-run (Smith 1984): ``chains`` walks from ``start``, each step a random direction within the simplex
    and a uniform point of the segment the bounds leave; ``5 d`` steps of burn-in, then one mixture every ``d``
    steps. Rejection from the unbounded simplex would be hopeless where caps bind (a 4-epoch cap of 0.08 on five
    datasets leaves a tiny share of the simplex)."""
    d = len(start)
    free = hi - lo > 1e-12
    if free.sum() < 2:  # the bounds leave one mixture
        return np.tile(start, (n, 1))
    per = math.ceil(n / chains)
    x = np.tile(start.astype(np.float64), (chains, 1))
    out = []
    for step in range(5 * d + per * d):
        u = rng.standard_normal((chains, d)) * free
        u -= free * (u.sum(1, keepdims=True) / free.sum())  # a direction within the simplex's plane
        with np.errstate(divide="ignore", invalid="ignore"):
            to_lo, to_hi = (lo - x) / u, (hi - x) / u
        t_min = np.where(u > 0, to_lo, np.where(u < 0, to_hi, -np.inf)).max(1)
        t_max = np.where(u > 0, to_hi, np.where(u < 0, to_lo, np.inf)).min(1)
        x = np.clip(x + rng.uniform(t_min, np.maximum(t_max, t_min))[:, None] * u, lo, hi)
        if step >= 5 * d and (step - 5 * d) % d == d - 1:
            out.append(x.copy())
    return within_bounds(np.vstack(out)[:n], lo, hi)  # exact sums after rounding


def herd(pool: np.ndarray, first: np.ndarray, k: int, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``first`` and ``k`` mixtures of ``pool`` [m, d] picked one at a time by kernel herding (Chen, Welling and
    Smola 2010): each pick is where the pool is dense and the picks so far are not, so the picks spread over
    the pool like a space-filling design while staying typical of it (greedy maximin would take the simplex's
    corners first: a proxy with 80% of one dataset). Gaussian kernel, its width the pool's median distance;
    distances in units of each dataset's range ``hi - lo``, so a dataset capped at 0.08 is explored from 0 to
    0.08 as one free over [0, 1] is over its range. The first ``j`` picks never depend on ``k``."""
    span = np.where(hi - lo > 1e-12, hi - lo, 1.0)
    z = (pool - lo) / span
    sq = (z**2).sum(1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2.0 * z @ z.T, 0.0)  # [m, m] squared distances
    width2 = 2.0 * max(float(np.median(d2)), 1e-12)
    kernel = np.exp(-d2 / width2)
    density = kernel.mean(1)  # [m]: how typical each pool mixture is
    covered = np.exp(-(((z - (first - lo) / span) ** 2).sum(1)) / width2)  # [m]: kernel sum to the picks
    picked = [first]
    for t in range(1, k + 1):
        i = int(np.argmax((t + 1) * density - covered))
        picked.append(pool[i])
        covered += kernel[i]
    return np.vstack(picked)


def proxy_mixtures(space: SearchSpace, k: int, seed: int) -> np.ndarray:
    """The search's ``k`` mixtures [k, d]: the prior, then ``k - 1`` picked by ``herd`` from ``POOL`` mixtures
    uniform within the bounds (drawn from ``seed``): a space-filling design of the feasible region, each
    dataset's weight tried across its range. The pool depends only on the seed, so a search with more proxies
    keeps the mixtures of one with fewer."""
    pool = uniform_in_bounds(np.random.default_rng((seed, PROXY_STREAM)), space.prior, space.lo, space.hi, POOL)
    return herd(pool, space.prior, k - 1, space.lo, space.hi)


def candidate_mixtures(space: SearchSpace, n: int, seed: int, concentration: tuple[float, float]) -> np.ndarray:
    """``n`` candidate mixtures [n, d] for the proposal (another random stream than the proxies'): half uniform
    within the bounds, half RegMix's ``Dirichlet(C x center)`` draws moved within them (denser near the prior)."""
    rng = np.random.default_rng((seed, CANDIDATE_STREAM))
    uniform = uniform_in_bounds(rng, space.prior, space.lo, space.hi, n // 2, chains=1024)
    near = within_bounds(_dirichlet(rng, space.center, n - n // 2, concentration), space.lo, space.hi)
    return np.vstack([uniform, near])
