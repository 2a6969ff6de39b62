"""A user's callback, named in a training config by tests/bloomtrain/test_callbacks.py (never imported by the
trainer's own code): counts the iterations it saw (every ``every``-th), keeps that count in checkpoints under
``probe:<label>``, and writes what it saw to ``out`` (JSON) at the end of the run or on an error."""

from __future__ import annotations

import json
from typing import Any

from bloomtrain.callbacks import Callback


class Probe(Callback):
    def __init__(self, out: str, label: str = "probe", every: int = 1) -> None:
        self.out, self.label, self.every = out, label, every
        self.seen = 0  # iterations seen, over every resume (the state)
        self.resumed_with: dict[str, Any] | None = None

    @property
    def state_key(self) -> str:
        return f"probe:{self.label}"

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.resumed_with = dict(state)
        self.seen = state["seen"]

    def post_step(self, trainer, step) -> None:
        if step.iteration % self.every == 0:
            self.seen += 1

    def _write(self, **extra: Any) -> None:
        with open(self.out, "w") as f:
            json.dump({"label": self.label, "seen": self.seen, "resumed_with": self.resumed_with, **extra}, f)

    def post_train(self, trainer) -> None:
        self._write(ended="finished")

    def on_error(self, trainer, error: BaseException) -> None:
        self._write(ended="error", error=f"{type(error).__name__}: {error}")
