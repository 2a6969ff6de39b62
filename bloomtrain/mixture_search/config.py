"""``MixtureSearchConfig``: what ``bloomtrain mixture-search`` searches, with which proxies, for which objective.

One typed model is the command line's (flags generated from it), the ``--config`` YAML's and the flow's. Its
parts, in the order a search uses them:

- the datasets (``--dataset NAME=PREFIX`` / ``--datasets-dir``) and the tokenizer they were built with;
- the prior, ``tokens ** prior_alpha`` or a mixture file's ratios (``bloomdata.blend.tune.tune_blend`` computes
  either), around which the proxies' mixtures are drawn;
- the bounds every mixture of the search keeps: ``floor``/``cap`` per dataset and at most ``max_epochs``
  repetitions of any dataset at the token ``budget`` (``weight <= max_epochs x tokens / budget``; without a
  final budget, at the proxies' ``proxy_tokens``);
- the proxies: ``proxies`` small models (``proxy_config``, default ``default_proxy_config()``), each trained
  on ``proxy_tokens`` tokens of its mixture with seed ``seed``;
- the objective over each dataset's validation bits per byte: their mean, or a weighted mean;
- the validation (on by default): the prior, the proposal and the best proxy trained with ``validate_seeds``
  seeds, the best measured of them written to blend.yaml;
- where the proxies run: local processes (``workers``), an existing Dask cluster (``scheduler``) or a Slurm
  job array (``slurm``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from bloomdata.blend.tune import Bound
from bloomdata.config_loader import DASHBOARD, cli_option
from bloomdata.errors import FieldValueError
from bloomdata.megatron.splits import Compat
from bloomdata.units import parse_count
from bloomtrain.config import (
    CheckpointConfig,
    LoggingConfig,
    OptimConfig,
    ScheduleConfig,
    TrainConfig,
)
from bloomtrain.config import load_config as load_train_config
from bloomtrain.model.config import PRESETS

DEFAULT_SPLIT = "90,10,0"  # the pipeline blend stage's: every demo language keeps validation documents


def default_proxy_config() -> TrainConfig:
    """The built-in proxy: a 2-layer BLOOM (hidden 128, 8 heads, 64-token samples), fp32 with PyTorch kernels
    (no kernel build per proxy; bf16 is several times slower than fp32 on AVX2-only CPUs): small enough that a
    proxy of a few hundred thousand tokens trains in under a minute on one CPU core (benchmarks/RESULTS.md)."""
    return TrainConfig(
        model=PRESETS["tiny"](num_layers=2, hidden_size=128, num_heads=8, seq_length=64, kernels="torch"),
        optim=OptimConfig(precision="fp32", lr=3e-3, min_lr=3e-4, weight_decay=0.01),
        schedule=ScheduleConfig(micro_batch_size=16, global_batch_size=16, train_iters=300, warmup_samples=320),
        checkpoint=CheckpointConfig(dir=None),
        logging=LoggingConfig(log_interval=50, tensorboard=False),
    )


class MixtureSearchConfig(BaseModel):
    """A proxy-model mixture search (RegMix): datasets, prior, bounds, proxies, objective, where to run."""

    model_config = ConfigDict(extra="forbid")

    datasets: dict[str, str] = Field(default_factory=dict, description="a dataset as NAME=PREFIX (repeatable)",
                                     json_schema_extra=cli_option("--dataset", metavar="NAME=PREFIX"))
    datasets_dir: str | None = Field(default=None, json_schema_extra=cli_option(metavar="DIR"),
                                     description="every PREFIX.idx in this directory, named after its file")
    tokenizer: str = Field(description="tokenizer.json (or its directory) the datasets were built with: the "
                                       "proxies' vocabulary and the bytes of bits per byte",
                           json_schema_extra=cli_option(metavar="TOK"))
    out_dir: str = Field(description="search.json, search.md, search.png, blend.yaml (the proposal) and "
                                     "proxies/", json_schema_extra=cli_option("--out", metavar="DIR"))
    prior_alpha: float = Field(default=0.3, ge=0, description="the prior p ∝ tokens ** A (1: natural proportions)")
    prior_mixture: str | None = Field(default=None, json_schema_extra=cli_option(metavar="FILE"),
                                      description="the prior from a mixture YAML's ratios instead (e.g. "
                                                  "configs/data/bloom-tr11-mixture.yaml)")
    proxies: int = Field(default=16, ge=4, description="proxy models, the prior's included")
    proxy_config: str | None = Field(default=None, json_schema_extra=cli_option(metavar="YAML"),
                                     description="training YAML of the proxy recipe (bloomtrain train's); "
                                                 "default: a tiny CPU-sized BLOOM (default_proxy_config)")
    proxy_tokens: Annotated[int, BeforeValidator(parse_count)] = Field(
        default=600_000, ge=1, description="training tokens per proxy, e.g. 6e5",
        json_schema_extra=cli_option(metavar="TOKENS"))
    seed: int = Field(default=0, ge=0, description="seed of the mixtures drawn and of every proxy's training")
    objective: Literal["mean", "weighted"] = Field(default="mean", description="mean: every dataset's validation "
                                                   "bits per byte counts the same; weighted: --objective-weight")
    objective_weights: dict[str, float] = Field(
        default_factory=dict, json_schema_extra=cli_option("--objective-weight", metavar="NAME=W"),
        description="with objective=weighted, how much NAME's bits per byte count (repeatable; unnamed: 1)")
    floor: Bound = Field(default=None, json_schema_extra=cli_option(metavar="W|NAME=W"),
                         description="minimum weight: one for every dataset, or NAME=W per dataset")
    cap: Bound = Field(default=None, json_schema_extra=cli_option(metavar="W|NAME=W"),
                       description="maximum weight: one for every dataset, or NAME=W per dataset")
    token_budget: Annotated[int | None, BeforeValidator(parse_count)] = Field(
        default=None, ge=1, json_schema_extra=cli_option("--budget", metavar="TOKENS"),
        description="final training tokens the blend is for: caps each weight at max_epochs x tokens / budget "
                    "(default: at the proxies' tokens), and blend.yaml gets tokens drawn and epochs")
    max_epochs: float = Field(default=4.0, gt=0, description="repetitions of a dataset at the budget at most (4: "
                              "Muennighoff et al. 2023, repeated data stops helping past ~4 epochs; inf: no cap)")
    split: str | None = Field(default=DEFAULT_SPLIT, description="'90,10,0'-style train,valid,test split of every "
                                                                 "dataset; the proxies are scored on the valid part")
    train_range: str | None = Field(default=None, description="BLOOM per-dataset train range, e.g. 0:0.95")
    valid_range: str | None = Field(default=None, description="BLOOM per-dataset valid range, e.g. 0.95:1.0")
    compat: Compat = Field(default=Compat.CORE, description="split arithmetic: megatron-core's or "
                                                                        "Megatron-DeepSpeed's (BLOOM)")
    valid_samples: int = Field(default=256, ge=1, description="validation samples per dataset and proxy, at most "
                                                              "(fewer where the validation split holds fewer)")
    temperature: float = Field(default=1.0, gt=0, le=1, description="Dirichlet candidates are drawn around prior ** "
                               "T (renormalized; RegMix smooths a skewed prior with 0.5); 1: around the prior itself")
    concentration: tuple[float, float] = Field(
        default=(1.0, 30.0), json_schema_extra=cli_option(metavar="C"),
        description="half the candidates are Dirichlet(C x center) draws, C log-uniform in [MIN, MAX]: a small C "
                    "strays far from the center (the other half and the proxies are spread uniformly in the bounds)")
    candidates: int = Field(default=100_000, ge=100, description="mixtures scored by the fitted regression")
    top_k: int = Field(default=100, ge=1, description="the proposal starts from the better of the best candidate "
                                                      "and the mean of the best top_k, then SLSQP on the fit")
    regressor: Literal["auto", "lightgbm", "linear", "power"] = Field(
        default="auto", description="the fit that picks the proposal (auto: the best held-out Spearman; "
                                    "LightGBM from 64 proxies)")
    validate_proposal: bool = Field(default=True, json_schema_extra=cli_option("--validate"),
                                    description="train proxies on the proposal, the prior and the best proxy, same "
                                                "tokens and seeds, and write the best measured (--no-validate: the "
                                                "best known, the proposal unmeasured)")
    validate_seeds: int = Field(default=2, ge=2, description="seeds per validated mixture (seed+1, seed+2, ...); their "
                                                             "spread is the noise a win must exceed")
    workers: int = Field(default=2, ge=0, description="proxies at a time on this machine (Dask LocalCluster "
                                                      "processes; 0: one by one in this process)")
    threads: int = Field(default=1, ge=1, description="CPU threads per proxy (torch, OpenMP)")
    scheduler: str | None = Field(default=None, json_schema_extra=cli_option(metavar="ADDR"),
                                  description="tcp://host:port of a Dask scheduler: the proxies run on its workers")
    dashboard: bool = Field(default=False, description=DASHBOARD)
    slurm: bool = Field(default=False, description="run the proxies as a Slurm job array (sbatch --wait)")
    sbatch: list[str] = Field(default_factory=list, description="extra #SBATCH line for the array, e.g. "
                                                                "--sbatch=--partition=cpu (repeatable)")
    slurm_time: str = Field(default="02:00:00", description="with --slurm: each array task's time limit [D-]HH:MM:SS")
    env: list[str] = Field(default_factory=list, description="with --slurm: an exported VAR=value (repeatable)")
    python: str = Field(default="python", description="with --slurm: the Python that runs a proxy on a node")
    progress: bool = Field(default=True, description="a progress bar on stderr")

    @model_validator(mode="before")
    @classmethod
    def _ranges_replace_split(cls, data: Any) -> Any:
        """BLOOM ranges given without a split replace the default split (as ``bloomdata blend``)."""
        if isinstance(data, dict) and (data.get("train_range") or data.get("valid_range")) and "split" not in data:
            return {**data, "split": None}
        return data

    @model_validator(mode="after")
    def _check(self) -> MixtureSearchConfig:
        if self.split and (self.train_range or self.valid_range):
            raise ValueError("give either split or train_range/valid_range, not both")
        if not (self.split or self.valid_range):
            raise ValueError("the proxies are scored on each dataset's validation documents: give split (e.g. "
                             "90,10,0) or valid_range (e.g. 0.95:1)")
        if self.objective_weights and self.objective != "weighted":
            raise FieldValueError("objective_weights apply with objective=weighted; set objective to weighted",
                                  "objective", "objective_weights")
        if any(not w >= 0 for w in self.objective_weights.values()):
            raise ValueError(f"objective weights must be >= 0, got {self.objective_weights}")
        lo, hi = self.concentration
        if not 0 < lo <= hi:
            raise ValueError(f"concentration needs 0 < MIN <= MAX, got {lo} {hi}")
        if self.top_k > self.candidates:
            raise ValueError(f"top_k {self.top_k} is more than the {self.candidates} candidates")
        if self.scheduler and self.slurm:
            raise ValueError("give either scheduler (Dask) or slurm, not both")
        return self

    def proxy_recipe(self) -> TrainConfig:
        """The proxy's training config before the search fills in data, vocabulary and length."""
        return default_proxy_config() if self.proxy_config is None else load_train_config(self.proxy_config)
