"""``BlendConfig`` and ``tune_blend``: per-language blend weights for a token budget (``bloomdata blend``).

Token counts come from each prefix's ``.idx`` (the train range only, when a split or range is given); the
weights are ``constrain(alpha_weights(tokens, alpha), floor, cap, overrides)`` (bloomdata.mixture.weights).
The same model is the command line's (flags generated from it) and the flows' blend stage, which calls
``tune_blend`` directly.
"""

from __future__ import annotations

import glob
import os
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from bloomdata.config import cli_option
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.megatron.splits import parse_range, range_to_documents, split_range
from bloomdata.mixture.spec import BlendDataset, BlendSpec
from bloomdata.mixture.weights import alpha_weights, constrain
from bloomdata.units import parse_count

Bound = float | dict[str, float] | None


class BlendConfig(BaseModel):
    """Which datasets to blend, for how many tokens, with which alpha and bounds; where the files go."""

    model_config = ConfigDict(extra="forbid")

    datasets: dict[str, str] = Field(default_factory=dict, description="a dataset as NAME=PREFIX (repeatable)",
                                     json_schema_extra=cli_option("--dataset", metavar="NAME=PREFIX"))
    datasets_dir: str | None = Field(default=None, description="every PREFIX.idx in this directory, named after its file",
                                     json_schema_extra=cli_option(metavar="DIR"))
    token_budget: Annotated[int | None, BeforeValidator(parse_count)] = Field(
        default=None, ge=1, description="training tokens to draw, e.g. 350e9",
        json_schema_extra=cli_option("--budget", metavar="TOKENS"))
    alpha: float = Field(default=0.3, ge=0, description="p ∝ tokens**alpha (1: natural proportions, 0: uniform)")
    floor: Bound = Field(default=None, description="minimum weight: one for every dataset, or NAME=W per dataset",
                         json_schema_extra=cli_option(metavar="W|NAME=W"))
    cap: Bound = Field(default=None, description="maximum weight: one for every dataset, or NAME=W per dataset",
                       json_schema_extra=cli_option(metavar="W|NAME=W"))
    overrides: dict[str, float] = Field(default_factory=dict, description="a fixed weight as NAME=W (repeatable)",
                                        json_schema_extra=cli_option("--override", metavar="NAME=W"))
    max_epochs: float = Field(default=4.0, gt=0, description="warn when a dataset is repeated more often than this")
    seq_length: int | None = Field(default=None, ge=1, description="recorded in blend.yaml for the trainer")
    seed: int | None = Field(default=None, ge=0, description="recorded in blend.yaml for the trainer")
    split: str | None = Field(default=None, description="'949,50,1'-style train,valid,test split of every dataset, "
                                                        "recorded in blend.yaml (tokens counted on train)")
    train_range: str | None = Field(default=None, description="BLOOM per-dataset train range, e.g. 0:0.95")
    valid_range: str | None = Field(default=None, description="BLOOM per-dataset valid range, e.g. 0.95:1.0")
    compat: Literal["core", "bloom"] = Field(default="core", description="split arithmetic: megatron-core's or "
                                                                        "Megatron-DeepSpeed's (BLOOM)")
    out_dir: str = Field(description="output directory for blend.md, blend.json, blend.png, blend.yaml",
                         json_schema_extra=cli_option("--out", metavar="DIR"))

    @model_validator(mode="after")
    def _one_split(self) -> BlendConfig:
        if self.split and (self.train_range or self.valid_range):
            raise ValueError("give either split or train_range/valid_range, not both")
        return self


def _datasets(config: BlendConfig) -> dict[str, str]:
    named = dict(config.datasets)
    if config.datasets_dir:
        found = sorted(glob.glob(os.path.join(config.datasets_dir, "*.idx")))
        if not found:
            raise BloomstackError(f"datasets_dir {config.datasets_dir}: no *.idx files there; point it at a "
                                  "`bloomdata build` output directory")
        for path in found:
            named.setdefault(os.path.basename(path)[: -len(".idx")], path[: -len(".idx")])
    if not named:
        raise BloomstackError("no datasets: give --dataset NAME=PREFIX (repeatable) or --datasets-dir DIR")
    return named


def _train_tokens(prefix: str, config: BlendConfig) -> int:
    ds = IndexedDataset(prefix)
    if config.train_range:
        begin, end = range_to_documents(*parse_range(config.train_range), len(ds))
    elif config.split:
        begin, end = split_range(config.split, "train", len(ds), config.compat)
    else:
        begin, end = 0, len(ds)
    return int(ds.sizes[begin:end].sum(dtype="int64"))


def tune_blend(config: BlendConfig) -> BlendSpec:
    """The blend for ``config``: weights, tokens drawn and effective epochs per dataset, in dataset order."""
    if config.token_budget is None:
        raise BloomstackError("token_budget is not set: give --budget TOKENS (e.g. 350e9)")
    datasets = _datasets(config)
    tokens = {name: _train_tokens(prefix, config) for name, prefix in datasets.items()}
    weights = constrain(alpha_weights(tokens, config.alpha), config.floor, config.cap, config.overrides)
    budget = config.token_budget
    rows = []
    for name, prefix in datasets.items():
        w = weights[name]
        if w <= 0:
            continue  # an override of 0 drops the dataset from the blend
        drawn = int(round(w * budget))
        rows.append(BlendDataset(name=name, prefix=os.path.abspath(prefix), weight=w, tokens=tokens[name],
                                 tokens_drawn=drawn, epochs=drawn / tokens[name]))
    return BlendSpec(seq_length=config.seq_length, seed=config.seed, token_budget=budget, alpha=config.alpha,
                     split=config.split, train_range=config.train_range, valid_range=config.valid_range,
                     datasets=rows)
