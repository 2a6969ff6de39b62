"""How a training run is launched: a typed ``LaunchConfig`` and the command line it becomes.

The command is built here, Prefect-free, so a test can assert the exact argv and a user can copy it:

- torchrun: ``python -m bloomtrain.launcher --standalone --nproc-per-node N --max-restarts R -m bloomtrain.cli
  train --config X``: torchrun with bloomtrain's restart hook (single node; multi-node adds
  ``--nnodes/--rdzv-*`` through ``launcher_args``), with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` in its
  environment (``launch_env``);
- deepspeed: ``python -m deepspeed.launcher.runner --num_gpus N --no_local_rank --module bloomtrain.cli train ...``
  (``--no_local_rank``: our trainer reads LOCAL_RANK from the environment, not from argv);
- sbatch: ``sbatch --wait [args] SCRIPT`` (an sbatch script, e.g. from ``bloomtrain slurm``); ``--wait``
  makes sbatch block until the job ends and return its exit code, so cancelling is ``scancel`` of the job
  id sbatch printed (the job's ranks run on other nodes, out of reach of our process group).

We launch through ``sys.executable -m`` rather than the ``torchrun``/``deepspeed`` scripts so the job runs in
the same environment as the flow, whatever PATH says.

Recovery has two layers, both decided by bloomtrain.recovery from the trainer's exit records. Inside one
launch, the launcher restarts the worker group after a rank died (``max_restarts``, default 3; the trainer
resumes from ``latest`` on every start): cheap, the same processes' environment, no new launch; never after a
config or input error. When it gives up (or another launcher fails), the flow launches the job again
(``TrainStageConfig.retries``, after ``retry_delay_s``) if the attempt saved a newer checkpoint. The DeepSpeed
launcher has no restarts of its own, so only the flow's relaunches apply to it; an sbatch job recovers inside
Slurm (``bloomtrain slurm``).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

SBATCH_JOB_ID = re.compile(r"Submitted batch job (\d+)")


class LaunchConfig(BaseModel):
    launcher: Literal["torchrun", "deepspeed", "sbatch"] = "torchrun"
    nproc_per_node: int = Field(2, ge=1, description="processes (ranks) per node; on GPUs, one per device")
    module: str = Field("bloomtrain.cli", description="python module the launcher runs on every rank")
    module_args: list[str] = Field(default_factory=lambda: ["train"], description="arguments before --config")
    launcher_args: list[str] = Field(default_factory=list, description="extra launcher flags (rdzv, hostfile...)")
    sbatch_script: str | None = Field(None, description="launcher=sbatch: the batch script to submit")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for the job")
    timeout_s: float | None = Field(None, description="kill the job after this many seconds (None: no limit)")
    grace_s: float = Field(30.0, description="seconds between SIGTERM and SIGKILL when stopping the job")
    tail_lines: int = Field(40, description="output lines quoted in a Failed state")
    max_restarts: int = Field(3, ge=0, description="--max-restarts of bloomtrain.launcher (torchrun): worker-group "
                                                   "restarts (each resuming from the last checkpoint) before the "
                                                   "launch fails")
    retry_delay_s: float = Field(5.0, ge=0, description="seconds before the flow relaunches a failed job")


def build_command(launch: LaunchConfig, config_path: str | Path, overrides: Sequence[str] = ()) -> list[str]:
    """The argv that runs ``launch.module --config config_path *overrides`` under the chosen launcher."""
    program = [*launch.module_args, "--config", str(config_path), *overrides]
    if launch.launcher == "torchrun":
        return [sys.executable, "-m", "bloomtrain.launcher", "--standalone",
                f"--nproc-per-node={launch.nproc_per_node}", f"--max-restarts={launch.max_restarts}",
                *launch.launcher_args, "-m", launch.module, *program]
    if launch.launcher == "deepspeed":
        return [sys.executable, "-m", "deepspeed.launcher.runner", f"--num_gpus={launch.nproc_per_node}",
                "--no_local_rank", *launch.launcher_args, "--module", launch.module, *program]
    if not launch.sbatch_script:
        raise ValueError("launch.launcher=sbatch needs launch.sbatch_script=PATH (write one with `bloomtrain slurm`)")
    return ["sbatch", "--wait", *launch.launcher_args, launch.sbatch_script]


def launch_env(launch: LaunchConfig) -> dict[str, str]:
    """The job's extra environment: ``launch.env``, under torchrun over one that lets a restart reconnect.

    torchrun shares its rendezvous store with the workers by default, and a restarted worker group can then
    read the addresses the failed group left there and fail to connect (pytorch/pytorch#135712; seen with
    gloo on torch 2.13). ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` gives every worker group a fresh store.
    """
    base = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if launch.launcher == "torchrun" else {}
    return {**base, **launch.env}
