"""The proposal: the mixture the chosen fit predicts best within the bounds, and whether it is worth validating.

Candidates are ``candidates`` mixtures within the bounds (``space.candidate_mixtures``) plus the proxies' own.
RegMix averages the ``top_k`` best predicted; here the lower predicted of that mean and the single best
candidate starts SLSQP on the fit's predicted objective within the bounds (``polish``), so the proposal is the
fit's own minimum. Why: the mean of many good candidates lies inside the region they share, while the optimum
of a data-constrained search often sits on caps; on the synthetic law of
``benchmarks/bench_mixture_search.py --synthetic``, the mean of the best 100 of 10k candidates left 17% of
the prior-to-optimum gain unrealized even with the true law as the fit, and polishing left under 1%. The
power and ridge fits are smooth; LightGBM's trees are flat almost everywhere, so SLSQP keeps its start there.

The gate: a proposal is worth training only if the fit that picked it predicts it better than the prior's
measured objective (the search's prior proxy). When even the fit's minimum is not, no candidate is, and the
search keeps the prior without validating anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bloomtrain.mixture_search.fit import Fitted
from bloomtrain.mixture_search.space import within_bounds

SLSQP_OPTIONS = {"maxiter": 200, "ftol": 1e-10}


@dataclass(frozen=True)
class Candidate:
    """A mixture with the fit's prediction of it."""

    weights: np.ndarray  # [d]
    bpb: np.ndarray  # predicted bits per byte [d]
    objective: float  # predicted objective

    def better_than(self, measured: float) -> bool:
        return self.objective < measured - 1e-12


def _candidate(fitted: Fitted, weights: np.ndarray, objective: np.ndarray) -> Candidate:
    bpb = fitted.predict(weights[None, :])[0]
    return Candidate(weights, bpb, float(bpb @ objective))


def polish(fitted: Fitted, start: np.ndarray, objective: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """SLSQP from ``start`` [d] on the predicted objective over ``{sum w = 1, lo <= w <= hi}``; ``start``
    itself where that finds nothing lower (a flat fit, a failed solve)."""
    from scipy.optimize import minimize  # noqa: PLC0415

    def predicted(w: np.ndarray) -> float:
        return float(fitted.predict(w[None, :])[0] @ objective)

    solved = minimize(predicted, start, method="SLSQP", bounds=list(zip(lo, hi)), options=SLSQP_OPTIONS,
                      constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1.0}])
    found = within_bounds(np.clip(solved.x, lo, hi)[None, :], lo, hi)[0]
    return found if np.all(np.isfinite(found)) and predicted(found) < predicted(start) else start


def propose(fitted: Fitted, candidates: np.ndarray, objective: np.ndarray, lo: np.ndarray, hi: np.ndarray,
            top_k: int) -> Candidate:
    """The fit's best mixture within the bounds: from the better of the ``top_k`` mean (RegMix's rule; a mean
    of mixtures within the bounds is within them) and the best candidate, polished."""
    predicted = fitted.predict(candidates) @ objective
    order = np.argsort(predicted, kind="stable")
    mean = within_bounds(candidates[order[:top_k]].mean(0, keepdims=True), lo, hi)[0]
    start = min((_candidate(fitted, w, objective) for w in (mean, candidates[order[0]])), key=lambda c: c.objective)
    return _candidate(fitted, polish(fitted, start.weights, objective, lo, hi), objective)
