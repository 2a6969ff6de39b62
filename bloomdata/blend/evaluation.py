"""Evaluation results beside a blend: each dataset's bits per byte from ``bloomtrain evaluate``'s eval.json.

``bloomdata blend --eval eval.json`` adds a bits-per-byte column to blend.md/blend.json and a panel to
blend.png, so a person tuning the weights sees where the model is weak; with two reports (``--eval
before.json --eval after.json``, in that order) it shows both and the change per language (after minus
before: negative is better). The blend itself (weights, blend.yaml) never depends on them.

eval.json is read as JSON through the small models below (only the fields used here; the rest of the file is
ignored): bloomdata does not import bloomtrain, whose ``EvalReport`` writes the file. One model of each
report is shown: ``--eval-model NAME``, else the report's first model (the flows' evaluate stage puts the
exported model first, as ``exported``).

Matching is by name, as a mixture matches datasets: a blend dataset gets the bits per byte of the eval.json
language with the same name. The flows name both after the build's outputs (the evaluate stage scores each
blend dataset's validation documents under the dataset's name); with ``bloomtrain evaluate`` give the
languages as ``--data NAME=PATH`` with the blend's names. A dataset without a score shows ``-``; evaluated
languages that are not in the blend are listed under the table; a report that matches no dataset at all is a
one-line error (the names disagree).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bloomdata.blend.spec import BlendSpec
from bloomdata.blend.tune import BlendConfig
from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError

MAX_REPORTS = 2  # before and after


class BlendEvalConfig(BlendConfig):
    """``bloomdata blend``'s model: a ``BlendConfig`` plus evaluation reports shown beside the weights (they change
    the table and chart, never blend.yaml; the flows' blend stage takes the plain ``BlendConfig``)."""

    eval_reports: list[str] = Field(
        default_factory=list, json_schema_extra=cli_option("--eval", metavar="EVAL_JSON"),
        description="eval.json of `bloomtrain evaluate` or the flows' evaluate stage: each language's bits per byte "
                    "in the table and chart; given twice (before, after), both and the change")
    eval_model: str | None = Field(default=None, json_schema_extra=cli_option(metavar="NAME"),
                                   description="the model of each eval.json to show (default: its first)")


class EvalScore(BaseModel):
    """One language's scores in eval.json (``bits per byte = nll_sum / (ln 2 x bytes)``)."""

    model_config = ConfigDict(extra="ignore")

    docs: int
    bytes: int
    bpb: float | None


class EvalModel(BaseModel):
    model_config = ConfigDict(extra="ignore")

    languages: dict[str, EvalScore]


class EvalFile(BaseModel):
    """The part of eval.json read here: ``{"models": {NAME: {"languages": {LANG: {..., "bpb"}}}}}``."""

    model_config = ConfigDict(extra="ignore")

    models: dict[str, EvalModel] = Field(min_length=1)


def read_eval(path: str, model: str | None = None) -> tuple[str, dict[str, float | None]]:
    """(model name, language -> bits per byte) of one eval.json; every failure a one-line BloomstackError."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BloomstackError(f"eval_reports {path}: no such file; give the eval.json that `bloomtrain evaluate` "
                              "or the flows' evaluate stage wrote", keys=["eval_reports"]) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BloomstackError(f"eval_reports {path}: not a JSON file ({exc}); give an eval.json",
                              keys=["eval_reports"]) from None
    try:
        report = EvalFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise BloomstackError(f"eval_reports {path}: not an eval.json ({where}: {err['msg']}); give the eval.json "
                              "of `bloomtrain evaluate`", keys=["eval_reports"]) from None
    name = model if model is not None else next(iter(report.models))
    if name not in report.models:
        raise BloomstackError(f"eval_model {name}: {path} has no such model (it has {', '.join(report.models)}); "
                              "pick one of those", keys=["eval_model"])
    return name, {lang: s.bpb for lang, s in report.models[name].languages.items()}


@dataclass
class BlendEvaluation:
    """Bits per byte per blend dataset from one or two reports (before, after)."""

    reports: list[str]  # eval.json paths, in order
    models: list[str]  # the model shown from each
    bpb: dict[str, list[float | None]]  # dataset name -> bits per byte per report (None: not evaluated)
    unmatched: list[str]  # evaluated languages with no dataset of that name in the blend

    @property
    def compares(self) -> bool:
        return len(self.reports) == 2

    def latest(self, name: str) -> float | None:
        return self.bpb[name][-1]

    def change(self, name: str) -> float | None:
        """After minus before (negative: the model got better on this language); None without two values."""
        values = self.bpb[name]
        if not self.compares or values[0] is None or values[-1] is None:
            return None
        return values[-1] - values[0]

    def dataset_fields(self, name: str) -> dict[str, Any]:
        """What blend.json adds to the dataset's entry: ``bpb`` (the latest), ``bpb_before`` and ``bpb_change``."""
        fields: dict[str, Any] = {"bpb": self.latest(name)}
        if self.compares:
            fields.update(bpb_before=self.bpb[name][0], bpb_change=self.change(name))
        return fields

    def summary(self) -> dict[str, Any]:
        """blend.json's ``evaluation`` entry: where the numbers come from."""
        return {"reports": [{"path": p, "model": m} for p, m in zip(self.reports, self.models)],
                "unmatched_languages": self.unmatched}


def blend_evaluation(spec: BlendSpec, reports: list[str], model: str | None = None) -> BlendEvaluation:
    """The bits per byte of ``reports`` (one or two eval.json files) for each dataset of ``spec``, by name."""
    if not 1 <= len(reports) <= MAX_REPORTS:
        raise BloomstackError(f"eval_reports: give one eval.json, or two to compare (before, after); got "
                              f"{len(reports)}", keys=["eval_reports"])
    names = [d.name for d in spec.datasets]
    models, scores = [], []
    for path in reports:
        shown, bpb = read_eval(path, model)
        if not set(bpb) & set(names):
            raise BloomstackError(f"eval_reports {path}: none of its languages ({', '.join(bpb) or 'none'}) "
                                  f"is a dataset of "
                                  f"the blend ({', '.join(names)}); a dataset takes the scores of the language of the "
                                  "same name: evaluate with `bloomtrain evaluate --data NAME=PATH` using the blend's "
                                  "names", keys=["eval_reports"])
        models.append(shown)
        scores.append(bpb)
    unmatched = sorted({lang for bpb in scores for lang in bpb} - set(names))
    return BlendEvaluation(reports=list(reports), models=models,
                           bpb={n: [bpb.get(n) for bpb in scores] for n in names}, unmatched=unmatched)
