"""What a card may name, since it is written to be published: the model's name and the files it came from, never
a path of the machine that made it.

- The name: ``CardConfig.name`` (``export.name``), else the run's name: the directory of the run that holds its
  checkpoints (``runs/tiny/checkpoints`` -> ``tiny``; a checkpoint directory named otherwise is the run's own
  name). The pipeline passes its own run's name (flows.pipeline).
- A file: relative to the card's folder when both sit in one run folder (the pipeline's stages:
  ``../blend/blend.yaml`` from ``hf/``), else named by what it is: its run directory and its own name
  (``tiny/checkpoints``). The records themselves (provenance.json) keep absolute paths: they are what
  ``bloomtrain model-card`` reads the records back from.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from bloomdata.config_loader import derive
from bloomtrain.card.records import CardRecords
from bloomtrain.provenance import Provenance

CHECKPOINTS_DIR = "checkpoints"  # a run's checkpoint directory, as `bloomtrain train` and the flows lay runs out


def run_name(provenance: Provenance) -> str:
    """The run's name (module docstring)."""
    ckpt = Path(provenance.checkpoint)
    return ckpt.parent.name if ckpt.name == CHECKPOINTS_DIR and ckpt.parent.name else ckpt.name


def card_path(path: str | Path, card_dir: Path) -> str:
    """``path`` as a published card names it (module docstring)."""
    target, here = Path(path).resolve(), Path(card_dir).resolve()
    run = here.parent
    if run != Path(run.anchor) and target.is_relative_to(run):
        return os.path.relpath(target, here)
    return str(Path(*target.parts[-2:])) if len(target.parts) > 2 else target.name


def published(r: CardRecords, card_dir: Path) -> CardRecords:
    """``r`` with every path a card shows made ``card_path``; the records read stay as they were."""
    def shown(path: str | None) -> str | None:
        return card_path(path, card_dir) if path else path

    provenance = derive(r.provenance, checkpoint=shown(r.provenance.checkpoint))
    evaluation = (dataclasses.replace(r.evaluation, path=card_path(r.evaluation.path, card_dir))
                  if r.evaluation else None)
    return dataclasses.replace(r, provenance=provenance, blend_path=shown(r.blend_path),
                               tokenizer_dir=shown(r.tokenizer_dir), evaluation=evaluation)
