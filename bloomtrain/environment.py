"""The hardware and software a process runs on, read from the environment (not from any config).

The trainer records it once per launch (``bloomtrain.callbacks.metrics``: the ``run_start`` event of
``metrics.jsonl``, rank 0's view) and ``bloomtrain export`` records the versions it exported with, so a model
card states what really ran, and compute estimates multiply real wall time by real device counts.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path

from pydantic import BaseModel

# What the card lists: the training stack, then what exported and loads the weights.
TRAINING_PACKAGES = ("bloomstack", "torch", "deepspeed", "numpy", "tokenizers")
EXPORT_PACKAGES = ("bloomstack", "torch", "transformers", "safetensors", "huggingface_hub")


class RunEnvironment(BaseModel):
    """One launch's hardware (rank 0's device; the ranks of a launch are assumed alike) and software."""

    device: str  # "cuda" or "cpu"
    device_name: str | None = None  # "NVIDIA H100 80GB HBM3", or the CPU model
    processes: int  # the launch's world size: one process per device (per CPU process on CPU)
    nodes: int  # processes / processes per node (torchrun's LOCAL_WORLD_SIZE)
    threads_per_process: int  # torch intra-op threads (what a CPU process computes with)
    software: dict[str, str]  # package -> version, python included


def software_versions(packages: tuple[str, ...]) -> dict[str, str]:
    """``{package: version}`` of the installed ``packages`` (absent ones left out), python first."""
    versions = {"python": platform.python_version()}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def cpu_model() -> str | None:
    """The CPU's model name from /proc/cpuinfo (Linux), else what ``platform`` knows; None when nothing does."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip() or None
    except OSError:
        pass
    return platform.processor() or None


def read_environment(world_size: int) -> RunEnvironment:
    """This process's view of the launch: its device, the world size and node count, and the training stack."""
    import torch  # noqa: PLC0415 - only the trainer asks, and it has torch loaded already

    cuda = torch.cuda.is_available()
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world_size)) or world_size
    software = software_versions(TRAINING_PACKAGES)
    if cuda and torch.version.cuda:
        software["cuda"] = str(torch.version.cuda)
    return RunEnvironment(device="cuda" if cuda else "cpu",
                          device_name=torch.cuda.get_device_name() if cuda else cpu_model(),
                          processes=world_size, nodes=max(1, -(-world_size // per_node)),
                          threads_per_process=torch.get_num_threads(), software=software)
