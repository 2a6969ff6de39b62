"""What a model was made from: the typed records its model card is built from, and their one loader.

Two durable records, both written through bloomdata.durable (atomic, fsynced):

- ``TrainingRecord``: the trainer writes one into every checkpoint tag, beside the model config
  (``<tag>/bloomtrain_model.json``, key ``training``; bloomtrain.checkpoint.checkpointer): the training config as it
  ran, the position at the save (iteration, samples) and the world size. It travels with the weights, so any tag
  knows what trained it, on which blend and tokenizer, and where the run's ``metrics.jsonl`` is.
- ``Provenance``: ``provenance.json`` in a directory ``bloomtrain export`` wrote: the checkpoint and tag exported,
  the model config and layout, that tag's ``TrainingRecord`` (copied: old tags get pruned), the card settings
  (``CardConfig``: licence, the clean summary, fertility and evaluation records, power and carbon figures) and how
  it was exported (dtype, embedding rows, tokenizer, software versions).

``load_provenance(dir)`` is the one loader: an export's provenance.json, or a checkpoint's tag (a card can be built
from either). Paths are stored absolute (resolved when written), so the records are found from any directory.
A checkpoint that holds no training record (``bloomtrain import``, or saved before records existed) gives a
``Provenance`` with ``training=None``: its card says so instead of guessing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from bloomdata import durable
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import format as fmt
from bloomtrain.config import CardConfig, TrainConfig
from bloomtrain.model.config import ModelConfig

PROVENANCE_FILE = "provenance.json"
FORMAT_VERSION = 1
TRAINING_KEY = "training"  # the TrainingRecord's key in a tag's bloomtrain_model.json
METRICS_FILE = "metrics.jsonl"  # in the training config's logging.dir (bloomtrain.metrics)


class TrainingRecord(BaseModel):
    """The run that wrote a checkpoint tag, as of that tag."""

    train_config: TrainConfig  # as it ran (the YAML, flags and overrides resolved)
    iteration: int  # iterations done at the save
    consumed_samples: int  # sequences of train_config.model.seq_length tokens
    world_size: int  # processes of the launch that saved it

    @property
    def consumed_tokens(self) -> int:
        return self.consumed_samples * self.train_config.model.seq_length

    @property
    def metrics_file(self) -> Path | None:
        """The run's metrics.jsonl, None when it logged to the console only."""
        log_dir = self.train_config.logging.dir
        return Path(log_dir) / METRICS_FILE if log_dir else None


class ExportRecord(BaseModel):
    """How ``bloomtrain export`` wrote the weights."""

    dtype: str  # of model.safetensors
    embedding_rows: int  # the padded vocabulary the weights hold
    tokenizer: str | None  # where the tokenizer files came from; None: none were found
    software: dict[str, str]  # package -> version of the exporting environment


class Provenance(BaseModel):
    """``provenance.json``: everything a model card is built from, or where it is."""

    format_version: int = FORMAT_VERSION
    checkpoint: str
    tag: str
    model: ModelConfig
    tp_size: int
    pp_size: int
    training: TrainingRecord | None = None
    card: CardConfig = CardConfig()
    export: ExportRecord | None = None  # None: built from a checkpoint, not an export

    @property
    def parameters(self) -> int:
        """Parameters of the weights, the tied head counted once (the export keeps every padded embedding row)."""
        return self.model.num_parameters(self.tp_size)


def training_record(cfg: TrainConfig, position: dict[str, Any], world_size: int) -> dict[str, Any]:
    """The ``TrainingRecord`` of a save, as the JSON the checkpoint's metadata holds under ``TRAINING_KEY``."""
    record = TrainingRecord(train_config=cfg, iteration=position["iteration"],
                            consumed_samples=position["consumed_samples"], world_size=world_size)
    return record.model_dump(mode="json")


def read_training_record(ckpt_dir: Path, tag: str) -> TrainingRecord | None:
    """The tag's training record; None when its metadata has none (or one this version cannot read)."""
    meta = durable.read_json(Path(ckpt_dir) / tag / fmt.METADATA_FILE)
    if not isinstance(meta, dict) or TRAINING_KEY not in meta:
        return None
    try:
        return TrainingRecord.model_validate(meta[TRAINING_KEY])
    except (ValidationError, BloomstackError):
        return None


def absolute_paths(card: CardConfig) -> CardConfig:
    """``card`` with its record paths made absolute (relative ones are relative to the working directory)."""
    fields = ("clean_summary", "fertility", "evaluation")
    return derive(card, **{f: str(Path(v).resolve()) for f in fields if (v := getattr(card, f))})


def checkpoint_provenance(ckpt_dir: Path, tag: str | None, card: CardConfig) -> Provenance:
    """The provenance of a checkpoint tag (``latest`` by default), before any export."""
    tag = fmt.read_tag(Path(ckpt_dir), tag)
    meta = durable.read_json(Path(ckpt_dir) / tag / fmt.METADATA_FILE) or {}
    return Provenance(checkpoint=str(Path(ckpt_dir).resolve()), tag=tag, model=fmt.read_config(Path(ckpt_dir), tag),
                      tp_size=meta.get("tp_size", 1), pp_size=meta.get("pp_size", 1),
                      training=read_training_record(Path(ckpt_dir), tag), card=absolute_paths(card))


def write_provenance(out_dir: Path, provenance: Provenance) -> Path:
    path = Path(out_dir) / PROVENANCE_FILE
    durable.write_json(path, provenance, indent=2)
    return path


def read_provenance(model_dir: Path) -> Provenance | None:
    """An export's provenance.json; None when the directory has none; an error naming the fix when it is unreadable."""
    path = Path(model_dir) / PROVENANCE_FILE
    if not path.is_file():
        return None
    record = durable.read_json(path)
    try:
        return Provenance.model_validate(record)
    except (ValidationError, BloomstackError) as exc:
        first = str(exc).strip().splitlines()[0][:200]
        raise BloomstackError(f"{path}: not a provenance record this version reads ({first}); re-export the "
                              "checkpoint with `bloomtrain export`") from None


def load_provenance(path: str | Path, tag: str | None = None, card: CardConfig | None = None) -> Provenance:
    """The records of ``path``: an exported model directory (its provenance.json) or a checkpoint directory (the
    tag's metadata). ``card``: card settings that replace the stored ones field by field (only the fields it set)."""
    path = Path(path)
    provenance = read_provenance(path)
    if provenance is None:
        if not (path / "latest").is_file() and tag is None:
            hint = " (an export from before model cards: export the checkpoint again)" \
                if (path / "config.json").is_file() else ""
            raise BloomstackError(f"{path}: neither an exported model (no {PROVENANCE_FILE}){hint} nor a checkpoint "
                                  "directory (no `latest`); give the directory `bloomtrain export` wrote or the "
                                  "checkpoint directory")
        provenance = checkpoint_provenance(path, tag, CardConfig())
    if card is not None:
        given = {k: getattr(card, k) for k in card.model_fields_set & set(CardConfig.model_fields)}
        provenance = derive(provenance, card=absolute_paths(derive(provenance.card, **given)))
    return provenance
