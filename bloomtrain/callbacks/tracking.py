"""Weights & Biases (``logging.wandb``): what TensorBoard gets, on global rank 0, and the resolved config.

Every record handed to ``trainer.log`` (the iteration's loss, lr, grad norm, throughput and MFU; the overall and
per-language validation losses; whatever a callback adds) goes to W&B with the same numbers TensorBoard gets
(``bloomtrain.metrics.Metrics.log``: every int and float but ``iteration`` and ``time``; headers are not records),
plotted against ``iteration`` (``define_metric``) rather than W&B's own step: a resumed run repeats the
iterations after its last checkpoint, which W&B would drop as out of order under its step (metrics.jsonl keeps
both too; its readers take the later). The run's config is the resolved ``TrainConfig``.

A resumed run continues the same W&B run: the run id is this callback's checkpointed state, chosen by rank 0 on
the first launch and broadcast so every rank saves the same, and ``wandb.init(id=..., resume="allow")`` reopens
it (offline: a new run directory with the same id, which ``wandb sync`` appends to the run).
"""

from __future__ import annotations

import secrets
from typing import Any

import torch.distributed as dist

from bloomdata.errors import BloomstackError
from bloomtrain.callbacks.base import METRICS, Callback, TrainerView
from bloomtrain.config import TrainConfig
from bloomtrain.wandb_config import WandbConfig

UNTRACKED = ("iteration", "time")  # TensorBoard's exceptions: the x-axis and the wall clock


def require_wandb(cfg: TrainConfig) -> None:
    """One line, before any model is built, when ``logging.wandb`` is set and the package is missing."""
    if cfg.logging.wandb is None:
        return
    try:
        import wandb  # noqa: F401, PLC0415 - an optional extra
    except ImportError:
        raise BloomstackError("logging.wandb is set but the wandb package is not installed: pip install "
                              "'bloomstack[wandb]', or remove logging.wandb") from None


def wandb_callbacks(cfg: TrainConfig, rank: int) -> list[Callback]:
    """``[WandbCallback]`` when ``logging.wandb`` is set (``cfg``: the resolved config it records), else []."""
    require_wandb(cfg)
    return [] if cfg.logging.wandb is None else [WandbCallback(cfg.logging.wandb, cfg, rank)]


def _agreed_id() -> str:
    """A new run id, rank 0's on every rank."""
    chosen = [secrets.token_hex(4)]
    if dist.is_available() and dist.is_initialized():
        dist.broadcast_object_list(chosen, src=0)
    return str(chosen[0])


class WandbCallback(Callback):
    priority = METRICS

    def __init__(self, config: WandbConfig, train_config: TrainConfig, rank: int) -> None:
        self.config, self.train_config, self.rank = config, train_config, rank
        self.run_id: str | None = None
        self.run: Any = None

    def state_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id} if self.run_id else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.run_id = state.get("run_id")

    def pre_train(self, trainer: TrainerView) -> None:
        if self.run_id is None:
            self.run_id = _agreed_id()
        if self.rank != 0 or self.config.mode == "disabled":
            return
        import wandb  # noqa: PLC0415 - an optional extra, checked by wandb_callbacks

        c = self.config
        try:
            self.run = wandb.init(project=c.project, entity=c.entity, name=c.name, mode=c.mode, dir=c.dir,
                                  id=self.run_id, resume="allow", config=self.train_config.model_dump(mode="json"))
        except wandb.errors.Error as exc:  # no API key, an unknown entity, no server: one line, a config error
            raise BloomstackError(f"logging.wandb: W&B could not start run {self.run_id} in project {c.project} "
                                  f"({exc}); run `wandb login` or set WANDB_API_KEY, or set logging.wandb.mode to "
                                  "offline") from None
        self.run.define_metric("iteration")
        self.run.define_metric("*", step_metric="iteration")

    def log_metrics(self, trainer: TrainerView, record: dict[str, Any], step: int, console: str | None) -> None:
        if self.run is None or "event" in record:
            return
        values = {k: v for k, v in record.items() if isinstance(v, int | float) and k not in UNTRACKED}
        if values:
            self.run.log({**values, "iteration": step})

    def on_error(self, trainer: TrainerView, error: BaseException) -> None:
        if self.run is not None:
            self.run.finish(exit_code=1)
            self.run = None

    def close(self, trainer: TrainerView) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None
