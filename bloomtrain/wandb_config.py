"""``logging.wandb``: where a run's metrics go in Weights & Biases (bloomtrain.callbacks.tracking logs them).

A model of its own, below bloomtrain.config, so that the config module stays one screenful per section and the
``wandb`` package is imported only by the callback (an optional extra: ``pip install 'bloomstack[wandb]'``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class WandbConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    project: str = "bloomstack"
    """W&B project the run is logged to."""
    entity: str | None = None
    """W&B team or user (None: the API key's default entity)."""
    name: str | None = None
    """The run's display name (None: one W&B picks)."""
    mode: Literal["online", "offline", "disabled"] = "online"
    """online: stream to the server; offline: write the run under dir (upload later with `wandb sync`); disabled:
    log nothing (the run id is still kept)."""
    dir: str | None = None
    """Where W&B writes its files (None: WANDB_DIR, else the working directory)."""
