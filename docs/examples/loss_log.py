"""A user's training callback: one JSON line per iteration (iteration, loss, learning rate) in a file of the
user's choice, written by the first rank only (docs/extending.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bloomtrain.callbacks import Callback


class LossLog(Callback):
    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.lines = 0  # lines written over every resume: its state, saved in each checkpoint

    @property
    def state_key(self) -> str:
        return f"loss_log:{self.path}"

    def state_dict(self) -> dict[str, Any]:
        return {"lines": self.lines}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lines = state["lines"]

    def post_step(self, trainer, step) -> None:
        if trainer.state.tp_rank or trainer.state.pp_rank or trainer.state.dp_rank:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps({"iteration": step.iteration, "loss": step.out.loss, "lr": step.lr}) + "\n")
        self.lines += 1
