"""``SearchResult``: what a mixture search found, the content of ``search.json``.

Keys that scripts read (the issue's contract): ``proxies`` (each ``{weights, bpb, objective}``), ``fit`` (per
regressor ``{spearman, mae}``), ``proposal`` (``weights``, ``predicted``), ``validation`` (``prior`` and
``proposal``, each ``{objective, bpb}``) and ``choice`` (what blend.yaml holds: ``source``, ``weights``,
``objective``, ``reason``), where ``bpb`` maps a dataset name to its validation bits per byte. The rest says
where the numbers come from (datasets, bounds, objective weights, timings).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from bloomtrain.mixture_search.fit import HeldOut


class DatasetEntry(BaseModel):
    name: str
    prefix: str
    tokens: int = Field(description="training tokens (the train part of the split)")
    prior: float = Field(description="the prior's weight, within the bounds")
    lo: float = Field(description="the smallest weight allowed (floor)")
    hi: float = Field(description="the largest weight allowed (cap, max epochs at the budget)")
    prior_epochs: float = Field(description="repetitions of the dataset under the prior at the budget")


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
    epochs: dict[str, float] = Field(description="repetitions of each dataset at the budget")
    better_than_prior: bool = Field(description="predicted below the prior's measured objective: only then is it "
                                                "validated (else the prior is kept)")


class Measured(BaseModel):
    """A mixture's validation proxies: the mean over seeds, and each seed's objective."""

    name: str = Field(description="prior, proposal, or the proxy's name (p03)")
    weights: dict[str, float]
    objective: float
    bpb: dict[str, float]
    objectives: list[float] = Field(description="per seed")
    spread: float = Field(description="max - min of the objectives over seeds")


class Validation(BaseModel):
    """The finalists trained with every validation seed: the prior, the proposal and the best proxy (by the
    search's seed) where it measured better than the prior."""

    seeds: list[int]
    prior: Measured
    proposal: Measured
    proxy: Measured | None = Field(default=None, description="the best proxy, when it measured better than the prior")
    improvement: float = Field(description="prior objective - proposal objective (> 0: the proposal is better)")
    spread: float = Field(description="the larger seed spread of the prior and the proposal")
    tie: bool = Field(description="the proposal and the prior differ by less than the spread")


class Choice(BaseModel):
    """What blend.yaml holds: the best measured mixture, and the sentence that says why."""

    source: Literal["proposal", "prior", "proxy"]
    name: str = Field(description="proposal, prior, or the proxy's name (p03)")
    weights: dict[str, float]
    epochs: dict[str, float] = Field(description="repetitions of each dataset at the budget")
    objective: float = Field(description="its objective: the mean over the validation seeds, else as known (the "
                                         "search seed's measurement, or the proposal's prediction unvalidated)")
    measured: bool = Field(description="False only for a proposal written without validation")
    prior_objective: float = Field(description="the prior's, measured the same way")
    tie: bool = Field(description="it beats the prior by less than the seed spread")
    reason: str = Field(description="one sentence: what was written, the figures, and the next step")


class SearchResult(BaseModel):
    out_dir: str
    blend_yaml: str = Field(description="the chosen blend (choice), for bloomtrain train (data.blend)")
    prior_source: str
    token_budget: int | None
    epochs_budget: int = Field(description="the tokens the epochs are counted at: token_budget, else "
                                                      "the proxies' tokens")
    datasets: list[DatasetEntry]
    objective_weights: dict[str, float] = Field(description="each dataset's share of the objective (sum 1)")
    proxies: list[ProxyEntry]
    fit: dict[str, HeldOut] = Field(description="per regressor: held-out Spearman, MAE and predictions")
    selected: str = Field(description="the regressor whose predictions chose the proposal")
    proposal: Proposal
    validation: Validation | None = None
    choice: Choice
    seconds: dict[str, float] = Field(default_factory=dict, description="wall time of proxies, fit, validation")
