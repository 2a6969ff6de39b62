"""Regressions from a mixture's weights to each dataset's validation bits per byte, and their held-out scores.

Three regressors, fitted per dataset (one target each; the objective is a weighted sum of the predictions).
Each sees every dataset's epochs in the proxies (weight x proxy tokens / the dataset's tokens; ``scale`` is the
epochs per unit of weight), so that predicted loss can rise with weight where a small dataset is repeated
until it overfits (docs/mixture-search.md, "What a search does"); a fit monotone in the weight predicts the opposite and
proposes exactly that.

- ``lightgbm``: gradient-boosted trees on the weights and the epochs, as RegMix (sail-sg/regmix,
  regression.ipynb). RegMix fits 512+ proxies with LightGBM's defaults; a search of 16 has a few per leaf at
  most, so the trees here are small (4 leaves, 2 samples per leaf) and shrunk (learning rate 0.05, 300 rounds).
  Trees are not monotone by construction.
- ``linear``: ridge regression on ``log(w + LOG_EPS)`` and the epochs of every dataset (the "linear model on
  log-weights" baseline plus a linear repetition term), standardized, with the ridge strength of each target
  chosen by its exact leave-one-out error over a fixed grid (closed form through the SVD).
- ``power``: each dataset's bits per byte as a power law of its own weight plus a repetition cost,
  ``a + b (w + LOG_EPS) ** -1/2 + c epochs`` (least squares, ``b, c >= 0``: more of a dataset's own data helps
  it with diminishing returns, and each repetition costs the same), the shape of a data scaling law
  ``L(D) = E + B / D ** beta`` with D = w x proxy tokens, plus overfitting. Three parameters per dataset instead
  of 2d + 1: with 16 proxies of 10 datasets it is the one whose held-out ranking holds best, and its optimum is
  interior (a dataset's weight grows with its own slope until its repetitions cost more), so the proposal does
  not chase the corners where the other two extrapolate. It ignores transfer between datasets, which the
  other two can express given enough proxies: ``auto`` picks per search (LightGBM only from
  ``TREE_MIN_PROXIES`` proxies).

Held-out scores: every proxy is predicted by a fit that did not see it (leave-one-out up to ``MAX_FOLDS``
proxies, ``MAX_FOLDS``-fold beyond), and the predicted objectives are compared with the measured ones:
Spearman rank correlation (does the fit order mixtures right: what picking the best needs) and mean absolute
error (in bits per byte).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel

REGRESSORS = ("lightgbm", "linear", "power")
LOG_EPS = 1e-3  # weights of 0 (a dataset not drawn) stay finite on the log and power scales
POWER = 0.5  # the power law's exponent (beta)
RIDGE_GRID = np.logspace(-3, 3, 13)  # ridge strengths tried, relative to the number of proxies
MAX_FOLDS = 20
TREE_MIN_PROXIES = 64  # auto considers LightGBM from this many proxies (RegMix fits it on 512 and more)
LIGHTGBM_PARAMS = {"objective": "regression", "num_leaves": 4, "min_data_in_leaf": 2, "min_data_in_bin": 1,
                   "min_sum_hessian_in_leaf": 0.0, "learning_rate": 0.05, "num_iterations": 300,
                   "deterministic": True, "force_row_wise": True, "num_threads": 1, "verbose": -1}

Predictor = Callable[[np.ndarray], np.ndarray]  # weights [n, d] -> bits per byte [n, t]


class HeldOut(BaseModel):
    """One regressor's held-out scores: per proxy (search order), the predicted and measured objective."""

    spearman: float
    mae: float
    predicted: list[float]
    measured: list[float]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); 0 when either side is constant."""
    from scipy.stats import spearmanr  # noqa: PLC0415

    if np.ptp(a) == 0 or np.ptp(b) == 0:
        return 0.0
    return float(spearmanr(a, b).statistic)


def _ridge_column(z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Coefficients [d] of ridge regression of centred ``y`` [n] on standardized ``z`` [n, d], the strength
    chosen by exact leave-one-out error: residual_i / (1 - h_ii), h the hat matrix."""
    u, s, vt = np.linalg.svd(z, full_matrices=False)
    uty = u.T @ y
    best, best_err = np.zeros(z.shape[1]), np.inf
    for lam in RIDGE_GRID * len(y):
        shrink = s**2 / (s**2 + lam)
        fitted = u @ (shrink * uty)
        hat = (u**2) @ shrink + 1.0 / len(y)  # + the intercept's share of the hat matrix
        err = float(np.mean(((y - fitted) / np.maximum(1.0 - hat, 1e-9)) ** 2))
        if err < best_err:
            best, best_err = vt.T @ (s / (s**2 + lam) * uty), err
    assert best is not None  # RIDGE_GRID is not empty
    return best


def fit_linear(w: np.ndarray, y: np.ndarray, scale: np.ndarray, seed: int = 0) -> Predictor:
    """Ridge on every dataset's log-weight and epochs, one target per column of ``y`` [n, t]: a negative
    log-weight and a positive epochs coefficient make a dataset's loss fall, then rise, with its weight."""
    def features(weights: np.ndarray) -> np.ndarray:
        return np.hstack([np.log(weights + LOG_EPS), weights * scale])

    x = features(w)
    mean, std = x.mean(0), x.std(0)
    std = np.where(std > 0, std, 1.0)
    z = (x - mean) / std
    y_mean = y.mean(0)
    coef = np.stack([_ridge_column(z, y[:, j] - y_mean[j]) for j in range(y.shape[1])], axis=1)  # [2d, t]

    def predict(weights: np.ndarray) -> np.ndarray:
        return ((features(weights) - mean) / std) @ coef + y_mean

    return predict


def fit_lightgbm(w: np.ndarray, y: np.ndarray, scale: np.ndarray, seed: int = 0) -> Predictor:
    """LightGBM on the weights and epochs, one booster per column of ``y`` [n, t] (trees are not monotone:
    a dataset's loss may rise past some weight without an extra term)."""
    import lightgbm as lgb  # noqa: PLC0415

    x = np.hstack([w, w * scale])
    boosters = [lgb.train({**LIGHTGBM_PARAMS, "seed": seed}, lgb.Dataset(x, y[:, j], params={"verbose": -1}))
                for j in range(y.shape[1])]

    def predict(weights: np.ndarray) -> np.ndarray:
        features = np.hstack([weights, weights * scale])
        return np.stack([b.predict(features) for b in boosters], axis=1)

    return predict


def _nonnegative_pair(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(a, b, c) minimizing ``|y - a - b x[:, 0] - c x[:, 1]|`` with ``b, c >= 0`` (x [n, 2], y [n]): the
    unconstrained fit when it is feasible, else the better of the one-term fits (a two-variable active set)."""
    xc, yc = x - x.mean(0), y - y.mean()
    options = []
    for cols in ([0, 1], [0], [1], []):
        coef = np.zeros(2)
        if cols:
            sol, *_ = np.linalg.lstsq(xc[:, cols], yc, rcond=None)
            if (sol < 0).any():
                continue
            coef[cols] = sol
        options.append((float(np.sum((yc - xc @ coef) ** 2)), coef))
    coef = min(options, key=lambda o: o[0])[1]
    return float(y.mean() - x.mean(0) @ coef), float(coef[0]), float(coef[1])


def fit_power(w: np.ndarray, y: np.ndarray, scale: np.ndarray, seed: int = 0) -> Predictor:
    """Per dataset j: ``y[:, j] = a_j + b_j (w_j + LOG_EPS) ** -POWER + c_j epochs_j``, least squares with
    ``b_j, c_j >= 0``: more of a dataset's own data helps it, and repeating it costs in proportion to its
    epochs, so past ``w = (POWER b / c scale) ** (1 / (1 + POWER))`` more weight predicts worse."""
    t = y.shape[1]
    a, b, c = np.empty(t), np.empty(t), np.empty(t)
    for j in range(t):
        x = np.stack([(w[:, j] + LOG_EPS) ** -POWER, w[:, j] * scale[j]], axis=1)
        a[j], b[j], c[j] = _nonnegative_pair(x, y[:, j])

    def predict(weights: np.ndarray) -> np.ndarray:
        return a + b * (weights + LOG_EPS) ** -POWER + c * weights * scale

    return predict


FITS: dict[str, Callable[..., Predictor]] = {"lightgbm": fit_lightgbm, "linear": fit_linear, "power": fit_power}


@dataclass(frozen=True)
class Fitted:
    """A regressor fitted on every proxy, with its held-out scores."""

    name: str
    predict: Predictor
    held_out: HeldOut


def folds(n: int) -> list[np.ndarray]:
    """Held-out index sets: leave-one-out up to ``MAX_FOLDS`` proxies, then ``MAX_FOLDS`` interleaved folds."""
    k = min(n, MAX_FOLDS)
    return [np.arange(i, n, k) for i in range(k)]


def held_out(name: str, w: np.ndarray, y: np.ndarray, scale: np.ndarray, objective: np.ndarray,
             seed: int) -> HeldOut:
    """Predict each proxy's objective with a fit that did not see it; score against the measured ones."""
    predicted = np.empty(len(w))
    for test in folds(len(w)):
        train = np.setdiff1d(np.arange(len(w)), test)
        predicted[test] = FITS[name](w[train], y[train], scale, seed)(w[test]) @ objective
    measured = y @ objective
    return HeldOut(spearman=spearman(predicted, measured), mae=float(np.mean(np.abs(predicted - measured))),
                   predicted=predicted.tolist(), measured=measured.tolist())


def fit_all(w: np.ndarray, y: np.ndarray, scale: np.ndarray, objective: np.ndarray, seed: int) -> dict[str, Fitted]:
    """Every regressor: held-out scores, then the fit on every proxy. ``scale`` [d]: epochs per unit of
    weight (the proxies' training tokens over each dataset's)."""
    return {name: Fitted(name, FITS[name](w, y, scale, seed), held_out(name, w, y, scale, objective, seed))
            for name in REGRESSORS}


def choose(fits: dict[str, Fitted], regressor: str) -> Fitted:
    """The fit that picks the proposal: the one asked for, or (auto) the best held-out Spearman, then MAE, with
    LightGBM in the running only from ``TREE_MIN_PROXIES`` proxies: a tree's minimum is one of the proxies' own
    cells, and a lucky held-out ranking of a few proxies picks it (on 20 synthetic laws of 6 datasets with 8
    proxies, auto took LightGBM 4 times and its mean regret was 0.225 of the gain, power's alone 0.037)."""
    if regressor != "auto":
        return fits[regressor]
    running = [f for f in fits.values() if f.name != "lightgbm" or len(f.held_out.measured) >= TREE_MIN_PROXIES]
    return min(running, key=lambda f: (-f.held_out.spearman, f.held_out.mae))
