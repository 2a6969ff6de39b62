"""``Mixture``: a published training mixture (fixed ratios per dataset group) and the part of it a user has.

A mixture file (``configs/data/bloom-tr11-mixture.yaml``: BLOOM's tr11 mix) is the other way to weigh a blend.
Instead of ``p ∝ tokens ** alpha`` over whatever datasets are given (``bloomdata.blend.weights``), the
weights are the mixture's ratios, so a run draws its languages as the published one did.

Matching a dataset to a group is by name only (a dataset's name is its file name: ``en`` for ``en.bin/.idx``
in ``--datasets-dir``, or NAME of ``--dataset NAME=PREFIX``). A dataset belongs to the group whose key, source
name or one of its aliases it is called: ``en`` and BigScience's ``oscar-en`` are distinct groups, ``hi`` and
its source name ``indic-hi`` the same one. A group that merged several languages (tr11's Niger-Congo group)
lists them with their shares; datasets named after those languages then stand in for the group, each with
``ratio x share / sum(shares)`` of it, when no dataset matches the group itself.

The ratios of the groups present are renormalized to sum to 1; what is absent is reported (``missing``),
never silently dropped. The trade-off: a user whose datasets are not named after the mixture's keys must
rename (or pass ``--dataset KEY=PREFIX``) rather than have a fuzzy match guess for them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bloomdata.config_loader import load_config
from bloomdata.errors import BloomstackError
from bloomdata.megatron.splits import parse_range

RATIO_TOLERANCE = 1e-9  # a mixture's ratios must sum to 1 within this (float sums of 28 ratios: ~2e-16)


class MixtureSource(BaseModel):
    """Where a mixture's ratios were copied from (kept in the file so the copy can be checked)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    repo: str = Field(description="repository, e.g. bigscience-workshop/bigscience")
    path: str = Field(description="file in the repository")
    commit: str = Field(description="commit the ratios were read at")


class MixtureGroup(BaseModel):
    """One dataset group of a mixture: its ratio, the name it had in the source, who else it may be called."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ratio: float = Field(gt=0, le=1, description="fraction of the training samples drawn from this group")
    source: str | None = Field(default=None, description="the group's name in the source file (a dataset name "
                                                         "that also matches it)")
    aliases: tuple[str, ...] = Field(default=(), description="other dataset names that match this group")
    card_percent: float | None = Field(default=None, gt=0, description="the model card's share of the corpus, in "
                                                                       "percent (informational; rounded)")
    languages: dict[str, float] = Field(default_factory=dict, description="member languages of a merged group "
                                        "with their shares (any unit; only their proportions are used)")

    @field_validator("languages")
    @classmethod
    def _positive(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {k: v for k, v in value.items() if not v > 0}
        if bad:
            raise ValueError(f"member shares must be > 0, got {bad}")
        return value

    def names(self, key: str) -> tuple[str, ...]:
        """The dataset names that match this group (keyed ``key``) as a whole: key, source name, aliases."""
        return tuple(dict.fromkeys((key, *(() if self.source is None else (self.source,)), *self.aliases)))

    def member_ratios(self) -> dict[str, float]:
        """Each member language's part of ``ratio``, in proportion to its share."""
        total = math.fsum(self.languages.values())
        return {lang: self.ratio * share / total for lang, share in self.languages.items()}


class Mixture(BaseModel):
    """A mixture file: its source, the per-dataset train/valid ranges it was used with, and its groups."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: MixtureSource | None = Field(default=None, description="where the ratios come from")
    train_range: str | None = Field(default=None, description="per-dataset train range the mixture was used with, "
                                                               "e.g. 0:0.950 (BLOOM's split)")
    valid_range: str | None = Field(default=None, description="per-dataset valid range, e.g. 0.950:1.0")
    groups: dict[str, MixtureGroup] = Field(min_length=1, description="group key (ISO 639 code, with a source or "
                                                                      "script suffix) -> group")

    @field_validator("groups")
    @classmethod
    def _distribution(cls, groups: dict[str, MixtureGroup]) -> dict[str, MixtureGroup]:
        total = math.fsum(g.ratio for g in groups.values())
        if not math.isclose(total, 1.0, rel_tol=0.0, abs_tol=RATIO_TOLERANCE):
            raise ValueError(f"the ratios sum to {total:.12g}, not 1; correct them (a mixture is a distribution)")
        owner: dict[str, str] = {}
        for key, group in groups.items():
            for name in (*group.names(key), *group.languages):
                if owner.setdefault(name, key) != key:
                    raise ValueError(f"dataset name {name!r} would match both group {owner[name]} and group {key}; "
                                     "rename one")
        return groups

    @field_validator("train_range", "valid_range")
    @classmethod
    def _range(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_range(value)
            except BloomstackError as exc:
                raise ValueError(str(exc)) from None
        return value

    def names(self, key: str) -> tuple[str, ...]:
        """The dataset names that match group ``key`` as a whole: the key, the source name, the aliases."""
        return self.groups[key].names(key)

    def select(self, available: Iterable[str]) -> Selection:
        """Which of the ``available`` dataset names cover which groups (see the module docstring)."""
        available = list(dict.fromkeys(available))
        ratios: dict[str, float] = {}
        groups: dict[str, str] = {}
        missing: dict[str, float] = {}
        for key, group in self.groups.items():
            whole = [n for n in self.names(key) if n in available]
            members = [lang for lang in group.languages if lang in available]
            if len(whole) > 1:
                raise BloomstackError(f"datasets {' and '.join(whole)} both match mixture group {key}; keep one "
                                      "(move or rename the others)")
            if whole and members:
                raise BloomstackError(f"dataset {whole[0]} is all of mixture group {key}, and {', '.join(members)} "
                                      "are parts of it; keep the group or its parts, not both")
            if whole:
                ratios[whole[0]], groups[whole[0]] = group.ratio, key
            elif members:
                for lang, ratio in group.member_ratios().items():
                    if lang in available:
                        ratios[lang], groups[lang] = ratio, key
                    else:
                        missing[f"{key}/{lang}"] = ratio
            else:
                missing[key] = group.ratio
        unmatched = [name for name in available if name not in ratios]
        return Selection(ratios, groups, missing, unmatched)


@dataclass(frozen=True)
class Selection:
    """The datasets of a mixture a user has, in the mixture's order."""

    ratios: dict[str, float]  # dataset name -> its ratio in the mixture (not renormalized)
    groups: dict[str, str]  # dataset name -> the group key it covers (all of it, or one member language)
    missing: dict[str, float]  # group key, or "group/member", with no dataset -> its ratio in the mixture
    unmatched: list[str]  # dataset names no group claims (left out of the blend)

    @property
    def coverage(self) -> float:
        """Fraction of the mixture the datasets present hold."""
        return math.fsum(self.ratios.values())

    def weights(self) -> dict[str, float]:
        """The ratios renormalized over what is present (sum 1)."""
        total = self.coverage
        return {name: ratio / total for name, ratio in self.ratios.items()}


def load_mixture(path: str) -> Mixture:
    """A mixture YAML, validated; errors name the file line (``bloomdata.config_loader.load_config``)."""
    return load_config(Mixture, path, origin="mixture")
