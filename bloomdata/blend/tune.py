"""``BlendConfig`` and ``tune_blend``: per-language blend weights (``bloomdata blend``).

Two ways to weigh: for a token budget, ``constrain(alpha_weights(tokens, alpha), floor, cap, overrides)``
(bloomdata.blend.weights), or with a ``mixture`` file, its ratios renormalized over the groups present
(bloomdata.blend.mixture), with the same floor, cap and overrides on top. Token counts come from each
prefix's ``.idx`` (the train range only, when a split or range is given); with a budget they give the tokens
drawn and effective epochs per dataset. The same model is the command line's (flags generated from it) and
the flows' blend stage, which calls ``tune_blend`` directly.
"""

from __future__ import annotations

import glob
import os
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from bloomdata.blend.mixture import load_mixture
from bloomdata.blend.spec import BlendDataset, BlendSpec
from bloomdata.blend.weights import alpha_weights, constrain
from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.megatron.splits import Compat, Split, parse_range, range_to_documents, split_range
from bloomdata.units import parse_count

Bound = float | dict[str, float] | None


class BlendConfig(BaseModel):
    """Which datasets to blend, for how many tokens, with which alpha and bounds; where the files go."""

    model_config = ConfigDict(extra="forbid")

    datasets: dict[str, str] = Field(default_factory=dict, description="a dataset as NAME=PREFIX (repeatable)",
                                     json_schema_extra=cli_option("--dataset", metavar="NAME=PREFIX"))
    datasets_dir: str | None = Field(default=None,
                                     description="every PREFIX.idx in this directory, named after its file",
                                     json_schema_extra=cli_option(metavar="DIR"))
    token_budget: Annotated[int | None, BeforeValidator(parse_count)] = Field(
        default=None, ge=1, description="training tokens to draw, e.g. 350e9 (optional with a mixture)",
        json_schema_extra=cli_option("--budget", metavar="TOKENS"))
    alpha: float = Field(default=0.3, ge=0, description="p ∝ tokens**alpha (1: natural proportions, 0: uniform); "
                                                        "not used with a mixture")
    mixture: str | None = Field(
        default=None, json_schema_extra=cli_option(metavar="FILE"),
        description="mixture YAML (configs/data/bloom-tr11-mixture.yaml): its ratios, renormalized over the groups "
                    "the datasets cover (dataset NAME matches group NAME), are the weights; its train/valid ranges "
                    "are the default ranges")
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
    compat: Compat = Field(default=Compat.CORE, description="split arithmetic: megatron-core's or "
                                                                        "Megatron-DeepSpeed's (BLOOM)")
    out_dir: str = Field(description="output directory for blend.md, blend.json, blend.png, blend.yaml",
                         json_schema_extra=cli_option("--out", metavar="DIR"))

    @model_validator(mode="after")
    def _one_split(self) -> BlendConfig:
        if self.split and (self.train_range or self.valid_range):
            raise ValueError("give either split or train_range/valid_range, not both")
        return self


def named_datasets(datasets: dict[str, str], datasets_dir: str | None) -> dict[str, str]:
    """NAME -> PREFIX of what to blend (or search): ``datasets``, then every ``datasets_dir/*.idx`` not named there
    (named by its file), in file order."""
    named = dict(datasets)
    if datasets_dir:
        found = sorted(glob.glob(os.path.join(datasets_dir, "*.idx")))
        if not found:
            raise BloomstackError(f"datasets_dir {datasets_dir}: no *.idx files there; point it at a "
                                  "`bloomdata build` output directory")
        for path in found:
            named.setdefault(os.path.basename(path)[: -len(".idx")], path[: -len(".idx")])
    if not named:
        raise BloomstackError("nothing to blend: give datasets (NAME=PREFIX) or datasets_dir",
                              keys=["datasets", "datasets_dir"])
    return named


def _train_tokens(prefix: str, split: str | None, train_range: str | None, compat: Compat) -> int:
    ds = IndexedDataset(prefix)
    if train_range:
        begin, end = range_to_documents(*parse_range(train_range), len(ds))
    elif split:
        begin, end = split_range(split, Split.TRAIN, len(ds), compat)
    else:
        begin, end = 0, len(ds)
    return int(ds.sizes[begin:end].sum(dtype="int64"))


def blend_rows(datasets: dict[str, str], weights: dict[str, float], tokens: dict[str, int],
               budget: int | None) -> list[BlendDataset]:
    """The blend's rows: each weighted dataset with its tokens and, for a ``budget``, tokens drawn and epochs."""
    rows = []
    for name, w in weights.items():
        if w <= 0:
            continue  # an override of 0 drops the dataset from the blend
        drawn = None if budget is None else int(round(w * budget))
        rows.append(BlendDataset(name=name, prefix=os.path.abspath(datasets[name]), weight=w, tokens=tokens[name],
                                 tokens_drawn=drawn, epochs=None if drawn is None else drawn / tokens[name]))
    return rows


def tune_blend(config: BlendConfig) -> BlendSpec:
    """The blend for ``config``: weights, tokens drawn and effective epochs per dataset."""
    if config.mixture:
        return _mixture_blend(config)
    if config.token_budget is None:
        raise BloomstackError("token_budget is not set: give token_budget in tokens (e.g. 350e9)",
                              keys=["token_budget"])
    datasets = named_datasets(config.datasets, config.datasets_dir)
    tokens = {name: _train_tokens(p, config.split, config.train_range, config.compat) for name, p in datasets.items()}
    weights = constrain(alpha_weights(tokens, config.alpha), config.floor, config.cap, config.overrides)
    return BlendSpec(seq_length=config.seq_length, seed=config.seed, token_budget=config.token_budget,
                     alpha=config.alpha, split=config.split, train_range=config.train_range,
                     valid_range=config.valid_range,
                     datasets=blend_rows(datasets, weights, tokens, config.token_budget))


def _mixture_blend(config: BlendConfig) -> BlendSpec:
    """The mixture's ratios over the datasets given, in the mixture's order (``Mixture.select``)."""
    assert config.mixture is not None  # a mixture blend
    mixture = load_mixture(config.mixture)
    datasets = named_datasets(config.datasets, config.datasets_dir)
    selection = mixture.select(datasets)
    if not selection.ratios:
        raise BloomstackError(f"no dataset name ({', '.join(datasets)}) matches a group of {config.mixture}; "
                              f"name them after its group keys ({', '.join(list(mixture.groups)[:6])}, ...), e.g. "
                              "DIR/en.bin/.idx or datasets en=PREFIX", keys=["datasets"])
    explicit = config.split or config.train_range or config.valid_range
    train_range = config.train_range if explicit else mixture.train_range
    valid_range = config.valid_range if explicit else mixture.valid_range
    tokens = {name: _train_tokens(datasets[name], config.split, train_range, config.compat)
              for name in selection.ratios}
    empty = [name for name, n in tokens.items() if n <= 0]
    if empty:  # a mixture share cannot be drawn from nothing
        raise BloomstackError(f"dataset(s) {', '.join(empty)} hold no training tokens; drop them from the datasets")
    weights = constrain(selection.weights(), config.floor, config.cap, config.overrides)
    return BlendSpec(seq_length=config.seq_length, seed=config.seed, token_budget=config.token_budget,
                     split=config.split, train_range=train_range, valid_range=valid_range, mixture=config.mixture,
                     missing=selection.missing or None, unmatched=selection.unmatched or None,
                     datasets=blend_rows(datasets, weights, tokens, config.token_budget))
