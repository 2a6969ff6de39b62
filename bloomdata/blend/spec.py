"""``BlendSpec``: the blend YAML, the contract between ``bloomdata blend`` and its readers (trainer, flows).

A mapping with optional ``seq_length``/``seed``, the ``token_budget`` and ``alpha`` it was tuned for, a
``split`` spec (``"949,50,1"``) or BLOOM per-dataset ``train_range``/``valid_range``, and
``datasets: [{name, prefix, weight, tokens, tokens_drawn, epochs}]``. Only ``name``, ``prefix`` and
``weight`` are read to build a blend; the rest records how the weights were chosen: the token budget and
alpha, or the ``mixture`` file whose ratios they are, with the groups it has that were ``missing`` and the
datasets given that it has no group for (``unmatched``).
"""

from __future__ import annotations

import yaml
from pydantic import BaseModel, ConfigDict, Field

from bloomdata.config_loader import load_config
from bloomdata.errors import BloomstackError
from bloomdata.megatron.splits import Split


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
    mixture: str | None = Field(default=None, description="mixture file the weights are the ratios of")
    missing: dict[str, float] | None = Field(default=None, description="mixture groups with no dataset -> their "
                                                                       "ratio (renormalized away)")
    unmatched: list[str] | None = Field(default=None, description="datasets given that no mixture group claims "
                                                                  "(left out)")
    datasets: list[BlendDataset]

    @property
    def prefixes(self) -> list[str]:
        return [d.prefix for d in self.datasets]

    @property
    def weights(self) -> list[float]:
        return [d.weight for d in self.datasets]

    def split_of(self, group: Split) -> str | None:
        """The split string ``group``'s documents (train or valid) are read with, in every dataset:
        ``split`` (shared by both groups), else BLOOM's ``train_range``/``valid_range``. The trainer's samples,
        its per-language validation sets and the held-out evaluation all place documents through it."""
        if self.split is not None:
            return self.split
        return self.train_range if group == Split.TRAIN else self.valid_range

    @property
    def has_valid(self) -> bool:
        """Whether every dataset holds validation documents (a valid range, or a split with a valid part)."""
        if self.split is not None:
            parts = [float(x) for x in self.split.replace("/", ",").split(",") if x.strip()]
            return len(parts) > 1 and parts[1] > 0
        return self.valid_range is not None

    def valid_sets(self) -> dict[str, str]:
        """One validation set per dataset, NAME -> PREFIX, for the trainer's ``data.valid_sets`` (each read on
        this blend's validation documents; tr11's per-language ``valid_<lang>`` groups)."""
        return {d.name: d.prefix for d in self.datasets} if self.has_valid else {}

    def weighted_split(self, group: str = "train") -> str:
        """BLOOM's ``--train-weighted-split-paths`` string for this blend."""
        rng = self.train_range if group.startswith("train") else self.valid_range
        if rng is None:
            raise BloomstackError(f"blend has no {group} range; set train_range/valid_range (e.g. 0:0.95)")
        return f"{group}: " + ", ".join(f"{d.weight!r} {rng} {d.prefix}" for d in self.datasets)

    def to_yaml(self) -> str:
        header = "# Blend for bloomtrain / flows; written by `bloomdata blend` (schema: bloomdata.blend.spec)\n"
        return header + yaml.safe_dump(self.model_dump(exclude_none=True), sort_keys=False)


def load_blend_spec(path: str) -> BlendSpec:
    return load_config(BlendSpec, path)
