"""The precision a training run gets on the hardware it runs on: the one place that decides it.

``optim.precision: bf16`` is what a GPU run gets. A CPU trains bf16 at speed only with native bf16 units
(x86 AVX512-BF16 or AMX-BF16, Arm's BF16 extension); without them (an AVX2-only x86 such as AMD Zen 2, or
AVX-512 without BF16) oneDNN and ATen emulate bf16 and every matmul runs many times *slower* than fp32
(docs/install.md, "Precision that fits the hardware"). There a bf16
config trains in fp32 instead, and says so: one log line on rank 0, its ``precision`` in each launch's header in
``metrics.jsonl`` (``bloomtrain.metrics.read_precision``), and the checkpoint's ``train_config`` holds what ran.
``optim.force_bf16: true`` keeps bf16 on any CPU (the tests of bf16 numerics set it).

The decision is taken where the training runs, in the trainer's composition root (``bloomtrain.train``),
never by a launcher: a flow on a CPU login node launching onto GPU nodes (Slurm) must not decide for them.
Everything after it (engine, model dtype, the fused kernels' self-check, checkpoints, metrics) receives the
fitted config explicitly. ``CpuInfo`` is an input, so the decision is tested for any CPU on any machine.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bloomdata.config_loader import derive
from bloomtrain.config import TrainConfig

# /proc/cpuinfo flags (x86 "flags", Arm "Features") that mean bf16 matmuls run on hardware units.
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")


@dataclass(frozen=True)
class CpuInfo:
    """What the decision needs to know about a CPU."""

    model: str
    """The CPU's name (``model name`` in /proc/cpuinfo), for the log line."""
    flags: frozenset[str] = field(default_factory=frozenset)
    """Its feature flags (x86 ``flags``, Arm ``Features``); empty when unknown."""
    capability: str = ""
    """The vector ISA torch's CPU kernels dispatch to (``torch.backends.cpu.get_cpu_capability()``)."""
    onednn_bf16: bool | None = None
    """oneDNN's own bf16 check, used only when the flags are unknown (not Linux)."""

    @classmethod
    def detect(cls, cpuinfo: str | Path = "/proc/cpuinfo") -> CpuInfo:
        import torch  # noqa: PLC0415

        try:
            text = Path(cpuinfo).read_text()
        except OSError:
            text = ""
        fields: dict[str, str] = {}
        for block in text.split("\n\n"):  # the first processor's block is enough: every core is the same model
            fields = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in block.splitlines())}
            if "flags" in fields or "features" in fields:
                break
        model = fields.get("model name") or platform.processor() or platform.machine()
        flags = frozenset((fields.get("flags") or fields.get("features") or "").split())
        onednn = None if flags else bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
        return cls(model=model, flags=flags, capability=torch.backends.cpu.get_cpu_capability(),
                   onednn_bf16=onednn)

    @property
    def native_bf16(self) -> list[str]:
        """The flags that give it native bf16 (empty: none), or ``["oneDNN"]`` when only oneDNN could tell."""
        if not self.flags:
            return ["oneDNN"] if self.onednn_bf16 else []
        return [f for f in NATIVE_BF16_FLAGS if f in self.flags]

    def describe(self) -> str:
        return f"{self.model}; torch CPU kernels: {self.capability or 'unknown'}"


class PrecisionChoice(BaseModel):
    """The precision a run was configured with, the one it ran, and why (the record of the decision)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    configured: Literal["bf16", "fp32"]
    ran: Literal["bf16", "fp32"]
    device: str
    """"cuda" or "cpu (<model>; torch CPU kernels: <ISA>)"."""
    why: str

    @property
    def changed(self) -> bool:
        return self.ran != self.configured

    def line(self) -> str:
        """``precision: bf16 -> fp32, <why>`` when it changed, ``precision: bf16 (<why>)`` otherwise."""
        if self.changed:
            return f"precision: {self.configured} -> {self.ran}, {self.why}"
        return f"precision: {self.ran} ({self.why})"

    def apply(self, cfg: TrainConfig) -> TrainConfig:
        """``cfg`` with the precision that runs."""
        if cfg.optim.precision == self.ran:
            return cfg
        return derive(cfg, optim=derive(cfg.optim, precision=self.ran))


def fit_precision(cfg: TrainConfig, device_type: str, cpu: CpuInfo | None) -> PrecisionChoice:
    """The precision ``cfg`` runs in on ``device_type`` ("cuda", "cpu", ...); ``cpu`` describes the CPU."""
    configured = cfg.optim.precision
    if device_type != "cpu":
        return PrecisionChoice(configured=configured, ran=configured, device=device_type, why="as configured")
    assert cpu is not None, "a CPU run needs the CpuInfo of its CPU"
    device = f"cpu ({cpu.describe()})"
    if configured == "fp32":
        return PrecisionChoice(configured="fp32", ran="fp32", device=device, why="as configured")
    native = cpu.native_bf16
    if native:
        return PrecisionChoice(configured="bf16", ran="bf16", device=device,
                               why=f"as configured; the CPU has native bf16 ({', '.join(native)})")
    if cfg.optim.force_bf16:
        return PrecisionChoice(configured="bf16", ran="bf16", device=device,
                               why="optim.force_bf16 keeps bf16 on a CPU without native bf16 (several times "
                                   "slower than fp32 there)")
    return PrecisionChoice(
        configured="bf16", ran="fp32", device=device,
        why=f"this CPU ({cpu.describe()}) has no native bf16 (no AVX512-BF16, AMX-BF16 or Arm BF16): bf16 "
            "matmuls are emulated there, several times slower than fp32; optim.force_bf16=true keeps bf16")
