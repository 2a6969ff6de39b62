"""Training metrics: a JSONL file (the record of truth), TensorBoard scalars and a console progress line.

``Metrics`` is the writer; bloomtrain.callbacks.metrics decides what to record and when. Throughput uses
Megatron-DeepSpeed's formula (``throughput_calculator`` in its megatron/utils.py; Narayanan et al. 2021
eq. 3)::

    FLOPs/iteration = 24 * f * B * s * l * h^2 * (1 + s / (6 h) + V / (16 l h))

with B the global batch (sequences), s the sequence length, l layers, h hidden size, V the padded
vocabulary. ``f = 3`` (forward + backward) gives *model* FLOPs, used for ``tflops`` and ``mfu``;
``f = 4`` when activation checkpointing recomputes the forward gives *hardware* FLOPs (``hw_tflops``; BLOOM's
logged "149 TFLOPs" is this number). Recomputation is therefore not counted in MFU. TFLOP/s are per
device: FLOPs / (step time * world size). MFU = tflops / peak, with the peak from the config or the device.
Only global rank 0 writes anything; console lines go to the ``bloomtrain`` logger (bloomtrain.console).
"""

from __future__ import annotations

import json
import logging
import resource
from pathlib import Path
from typing import Any

import torch

from bloomtrain.config import TrainConfig
from bloomtrain.model.config import ModelConfig

log = logging.getLogger(__name__)

_PEAK_TFLOPS = {"A100": 312.0, "H100": 989.0, "H200": 989.0}  # dense bf16, per device


def flops_per_iteration(model: ModelConfig, global_batch: int, tp: int, recompute: bool) -> float:
    s, layers, h = model.seq_length, model.num_layers, model.hidden_size
    v = model.padded_vocab_size(tp)
    f = 4 if recompute else 3
    return 24.0 * f * global_batch * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))


def device_peak_tflops(configured: float | None) -> float | None:
    if configured is not None:
        return configured
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        return next((peak for key, peak in _PEAK_TFLOPS.items() if key in name), None)
    return None


def memory_gib() -> float:
    """Peak device memory (CUDA) or peak resident set size of this process (CPU), GiB."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # ru_maxrss is KiB on Linux


class Metrics:
    def __init__(self, cfg: TrainConfig, rank: int, world_size: int) -> None:
        self.cfg, self.world = cfg, world_size
        self.enabled = rank == 0
        self.peak = device_peak_tflops(cfg.logging.peak_tflops)
        self._jsonl = None
        self._tb = None
        if self.enabled and cfg.logging.dir:
            out = Path(cfg.logging.dir)
            out.mkdir(parents=True, exist_ok=True)
            # Appended line by line on purpose, not a durable file (bloomdata.durable): a crash loses at most a
            # torn last line, which readers skip. Kept open for the run.
            self._jsonl = open(out / "metrics.jsonl", "a", buffering=1)  # noqa: SIM115
            if cfg.logging.tensorboard:
                try:
                    from torch.utils.tensorboard import SummaryWriter  # noqa: PLC0415

                    self._tb = SummaryWriter(str(out / "tensorboard"))
                except ImportError:
                    log.warning("bloomtrain: tensorboard is not installed; writing metrics.jsonl only")

    def describe(self) -> None:
        """State the throughput formula once, in the JSONL and on the console (rank 0)."""
        recompute = self.cfg.parallel.activation_checkpointing
        text = ("tflops/mfu: model FLOPs 24*3*B*s*l*h^2*(1 + s/(6h) + V/(16lh)) per iteration / (step time * "
                f"world * 1e12), recomputation NOT counted; hw_tflops uses f={4 if recompute else 3} "
                f"({'activation recomputation counted' if recompute else 'no recomputation'}); "
                f"peak {self.peak or 'unknown'} TFLOP/s per device")
        self.log({"event": "throughput_formula", "text": text}, 0, f"bloomtrain: {text}")

    def throughput(self, global_batch: int, step_time: float) -> dict[str, float]:
        tokens = global_batch * self.cfg.model.seq_length
        recompute = self.cfg.parallel.activation_checkpointing
        model_flops = flops_per_iteration(self.cfg.model, global_batch, self.cfg.parallel.tp, False)
        hw_flops = flops_per_iteration(self.cfg.model, global_batch, self.cfg.parallel.tp, recompute)
        out = {
            "tokens_per_s": tokens / step_time,
            "tflops": model_flops / (step_time * self.world * 1e12),
            "hw_tflops": hw_flops / (step_time * self.world * 1e12),
        }
        if self.peak:
            out["mfu"] = out["tflops"] / self.peak
        return out

    def log(self, record: dict[str, Any], step: int, console: str | None = None) -> None:
        if not self.enabled:
            return
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(record) + "\n")
        if self._tb is not None:
            for key, value in record.items():
                if isinstance(value, int | float) and key != "iteration":
                    self._tb.add_scalar(key, value, step)
        if console:
            log.info(console)

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()


def progress_line(r: dict[str, Any], total_iters: int | None) -> str:
    of = f"/{total_iters}" if total_iters else ""
    parts = [
        f"iter {r['iteration']}{of}",
        f"samples {r['consumed_samples']}",
        f"loss {r['loss']:.4f}",
        f"lr {r['lr']:.3e}",
        f"gnorm {r['grad_norm']:.3f}",
        f"batch {r['global_batch']}",
        f"{r['tokens_per_s']:.0f} tok/s",
        f"{r['tflops']:.3f} TFLOP/s",
    ]
    if "mfu" in r:
        parts.append(f"MFU {100 * r['mfu']:.1f}%")
    parts += [f"step {r['step_time_s']:.3f}s", f"mem {r['memory_gib']:.2f}GiB", f"skipped {r['skipped_iters']}"]
    return " | ".join(parts)
