"""``SearchResult``: what a mixture search found, the content of ``search.json``.

Keys that scripts read (the issue's contract): ``proxies`` (each ``{weights, bpb, objective}``), ``fit`` (per
regressor ``{spearman, mae}``), ``proposal`` (``weights``, ``predicted``) and ``validation`` (``prior`` and
``proposal``, each ``{objective, bpb}``), where ``bpb`` maps a dataset name to its validation bits per byte.
The rest says where the numbers come from (datasets, bounds, objective weights, timings).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from bloomtrain.mixture_search.fit import HeldOut


class DatasetEntry(BaseModel):
    name: str
    prefix: str
    tokens: int = Field(description="training tokens (the train part of the split)")
    prior: float = Field(description="the prior's weight, within the bounds")
    lo: float = Field(description="the smallest weight allowed (floor)")
    hi: float = Field(description="the largest weight allowed (cap, max epochs at the budget)")


class ProxyEntry(BaseModel):
    name: str = Field(description="prior, p01, p02, ... in the order drawn")
    key: str = Field(description="its directory under proxies/")
    weights: dict[str, float]
    bpb: dict[str, float]
    objective: float
    seconds: float


class Prediction(BaseModel):
    objective: float
    bpb: dict[str, float]


class Proposal(BaseModel):
    weights: dict[str, float]
    predicted: Prediction
    regressor: str = Field(description="the fit that picked it")
    epochs: dict[str, float] | None = Field(default=None, description="repetitions of each dataset at the budget")


class Measured(BaseModel):
    """A mixture's validation proxies: the mean over seeds, and each seed's objective."""

    objective: float
    bpb: dict[str, float]
    objectives: list[float] = Field(description="per seed")
    spread: float = Field(description="max - min of the objectives over seeds (0 with one seed)")


class Validation(BaseModel):
    seeds: list[int]
    prior: Measured
    proposal: Measured
    improvement: float = Field(description="prior objective - proposal objective (> 0: the proposal is better)")


class SearchResult(BaseModel):
    out_dir: str
    blend_yaml: str = Field(description="the proposal, for bloomtrain train (data.blend)")
    prior_source: str
    token_budget: int | None
    datasets: list[DatasetEntry]
    objective_weights: dict[str, float] = Field(description="each dataset's share of the objective (sum 1)")
    proxies: list[ProxyEntry]
    fit: dict[str, HeldOut] = Field(description="per regressor: held-out Spearman, MAE and predictions")
    selected: str = Field(description="the regressor whose predictions chose the proposal")
    proposal: Proposal
    validation: Validation | None = None
    seconds: dict[str, float] = Field(default_factory=dict, description="wall time of proxies, fit, validation")
