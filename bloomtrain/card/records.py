"""``load_records``: every record a model card reads, loaded once from a ``Provenance``, with a note for each one
that is missing.

Where each comes from (nothing else is read, and nothing is guessed):

- the training run: the tag's ``TrainingRecord`` (config, position, world size); its ``metrics.jsonl`` (the
  training config's ``logging.dir``) cut at the exported iteration: the headline numbers, the validation curves,
  and every launch's wall time and hardware;
- the training data: the blend YAML the config trained on (``data.blend``), the tokenizer it names
  (``data.tokenizer``, else the export's) and that tokenizer's training_report.json;
- the card settings (``CardConfig``): the clean summary, the fertility table and eval.json. These are given on
  purpose, so a missing or unreadable one is an error naming its key; a record the training config points at
  that has gone (a deleted run directory) becomes a note on the card instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from bloomdata import durable
from bloomdata.blend.spec import BlendSpec, load_blend_spec
from bloomdata.clean.summary import CleanSummary
from bloomdata.errors import BloomstackError
from bloomdata.tokenizer.bpe import TokenizerReport, read_training_report
from bloomdata.tokenizer.fertility import FertilityRow, read_fertility
from bloomtrain.evaluation.report import EvalReport, ModelResult
from bloomtrain.metrics import Launch, TrainingSummary, read_launches, read_metrics, summarize
from bloomtrain.provenance import Provenance

M = TypeVar("M", bound=BaseModel)


@dataclass
class ModelEvaluation:
    """This model's part of an eval.json."""

    path: str  # the eval.json
    name: str  # the model's name in it
    result: ModelResult
    tasks: dict[str, dict[str, float]]  # lm-eval task -> metric -> value (this model's)
    task_splits: dict[str, str]  # lm-eval task -> the split it was scored on (absent in older eval.json files)
    settings: dict[str, Any]


@dataclass
class CardRecords:
    """What ``load_records`` found; None where a record is absent, with the reason in ``notes``."""

    provenance: Provenance
    summary: TrainingSummary | None = None  # metrics.jsonl up to the exported iteration
    train: list[dict[str, Any]] = field(default_factory=list)  # its training records
    evals: list[dict[str, Any]] = field(default_factory=list)  # its evaluation records
    launches: list[Launch] = field(default_factory=list)
    blend: BlendSpec | None = None
    blend_path: str | None = None
    tokenizer_dir: str | None = None
    tokenizer_report: TokenizerReport | None = None
    fertility: list[FertilityRow] | None = None
    clean: CleanSummary | None = None
    evaluation: ModelEvaluation | None = None
    notes: dict[str, str] = field(default_factory=dict)  # section -> why it is left out (one line)


def read_record(path: str, model: type[M], key: str) -> M:
    """The JSON record a card setting names: missing or unreadable is an error naming ``key`` and the fix."""
    record = durable.read_json(path)
    if record is None:
        raise BloomstackError(f"{key} {path}: no such JSON file (or not valid JSON); give the file, or leave {key} "
                              "unset to build the card without it")
    try:
        return model.model_validate(record)
    except ValidationError as exc:
        first = str(exc).strip().splitlines()[0][:200]
        raise BloomstackError(f"{key} {path}: not the record it should be ({model.__name__}: {first})") from None


def pick_model(report: EvalReport, path: str, name: str | None, model_dir: Path | None) -> str:
    """This model's name in eval.json: ``name``, else the model scored from ``model_dir``, else the only one."""
    if name is not None:
        if name not in report.models:
            raise BloomstackError(f"evaluated_model {name}: {path} has no such model "
                                  f"(it holds {sorted(report.models)})")
        return name
    if model_dir is not None:
        mine = [n for n, r in report.models.items() if Path(r.path).resolve() == model_dir.resolve()]
        if len(mine) == 1:
            return mine[0]
    if len(report.models) == 1:
        return next(iter(report.models))
    raise BloomstackError(f"evaluation {path}: it scored {sorted(report.models)} and none was read from this "
                          "directory; set evaluated_model to this model's name there")


def load_evaluation(path: str, name: str | None, model_dir: Path | None) -> ModelEvaluation:
    report = read_record(path, EvalReport, "evaluation")
    chosen = pick_model(report, path, name, model_dir)
    tasks = {task: per_model[chosen] for task, per_model in report.tasks.items() if chosen in per_model}
    return ModelEvaluation(path=path, name=chosen, result=report.models[chosen], tasks=tasks,
                           task_splits=report.task_splits, settings=report.settings)


def _training(records: CardRecords) -> None:
    """metrics.jsonl up to the exported iteration: the headline numbers, curves and launches."""
    training = records.provenance.training
    if training is None:
        records.notes["training"] = ("the checkpoint holds no training record (written by `bloomtrain import`, or "
                                     "by an older version)")
        return
    metrics = training.metrics_file
    if metrics is None or not metrics.is_file():
        # (a card names no path of this machine: the file by its name only)
        records.notes["metrics"] = (f"the run's {metrics.name} is gone" if metrics else "the run logged to the "
                                    "console only (no logging.dir)")
        return
    train, evals = read_metrics(metrics)
    records.train = [r for r in train if r["iteration"] <= training.iteration]
    records.evals = [r for r in evals if r["iteration"] <= training.iteration]
    records.summary = summarize(records.train, records.evals)
    records.launches = read_launches(metrics, training.iteration)
    if not records.launches:
        records.notes["launches"] = (f"the run's {metrics.name} holds no launch header with times "
                                     "(written by an older version)")


def _data(records: CardRecords) -> None:
    """The blend the run trained on and its tokenizer (with the tokenizer's training report when present)."""
    training, export = records.provenance.training, records.provenance.export
    data = training.train_config.data if training else None
    if data is not None and data.kind == "blend" and data.blend:
        if Path(data.blend).is_file():
            records.blend, records.blend_path = load_blend_spec(data.blend), data.blend
        else:
            records.notes["blend"] = f"the blend the run trained on ({Path(data.blend).name}) is gone"
    elif data is not None:
        records.notes["blend"] = f"the run trained on {data.kind} data, not a blend"
    tokenizer = (data.tokenizer if data else None) or (export.tokenizer if export else None)
    if tokenizer is not None:
        tok_dir = Path(tokenizer) if Path(tokenizer).is_dir() else Path(tokenizer).parent
        records.tokenizer_dir = str(tok_dir)
        records.tokenizer_report = read_training_report(tok_dir)


def load_records(provenance: Provenance, model_dir: Path | None = None) -> CardRecords:
    """Every record ``provenance`` leads to (``model_dir``: the directory the card describes, to find this model
    in eval.json)."""
    records = CardRecords(provenance=provenance)
    card = provenance.card
    _training(records)
    _data(records)
    if card.clean_summary:
        records.clean = read_record(card.clean_summary, CleanSummary, "clean_summary")
    if card.fertility:
        records.fertility = read_fertility(card.fertility, key="fertility")
    if card.evaluation:
        records.evaluation = load_evaluation(card.evaluation, card.evaluated_model, model_dir)
    return records
