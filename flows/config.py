"""Typed flow parameters: one pydantic model per stage, composed into ``PipelineConfig``.

These models are the deployments' parameter schemas (Prefect derives the OpenAPI schema from the type
hints), so every field has a default that runs the embedded demo on a 2-core CPU box, and a description
the UI shows. Library configs (``bloomtrain.config.TrainConfig`` ...) are embedded as they are, not
re-declared, so a field added to the trainer is a flow parameter at once.

Paths: each stage writes under its own ``out_dir``; ``PipelineConfig.out_dir`` places them all and the
pipeline wires each stage's outputs into the next stage's inputs (a user never types a blend path).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from bloomtrain.config import (
    CheckpointConfig,
    LoggingConfig,
    OptimConfig,
    ParallelConfig,
    ScheduleConfig,
    TrainConfig,
)
from bloomtrain.model.config import PRESETS
from flows.launch_config import LaunchConfig


def demo_train_config() -> TrainConfig:
    """A tiny BLOOM that trains in about a minute on 2 CPU processes, tensor-parallel over both (tp=2)."""
    return TrainConfig(
        model=PRESETS["tiny"](),
        parallel=ParallelConfig(tp=2, pp=1),
        optim=OptimConfig(precision="fp32", lr=3e-3, min_lr=3e-4, weight_decay=0.01),
        schedule=ScheduleConfig(micro_batch_size=4, global_batch_size=8, train_iters=40, warmup_samples=32),
        checkpoint=CheckpointConfig(save_interval=20, keep_last=1),
        logging=LoggingConfig(log_interval=1, eval_interval=20, eval_iters=1, tensorboard=False),
    )


class TrainStageConfig(BaseModel):
    train: TrainConfig = Field(default_factory=demo_train_config, description="the trainer's own config")
    launch: LaunchConfig = Field(default_factory=LaunchConfig, description="how the job is started")
    overrides: list[str] = Field(default_factory=list, description="extra key=value trainer overrides")
    retries: int = Field(1, ge=0, description="relaunches after a crash (each resumes from the last checkpoint)")
    out_dir: str = Field("runs/train", description="run directory: train.yaml, checkpoints/, logs/, loss.png")
