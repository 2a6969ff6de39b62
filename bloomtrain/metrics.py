"""Training metrics: a JSONL file (the record of truth), TensorBoard scalars and a console progress line.

``Metrics`` is the writer; bloomtrain.callbacks.metrics decides what to record and when. Throughput counts
FLOPs as Megatron-LM does (``num_floating_point_operations`` in its megatron/training/training.py), which for
BLOOM's shape (multi-head attention, a GeLU MLP of width f = 4h, no gating) is, per token::

    model FLOPs/token = 3 * 2 * (l * (4 h^2 + 2 h f + h s / 2 * 2) + h V) = l * (72 h^2 + 6 h s) + 6 h V

with l layers, h hidden size, s the sequence length, V the padded vocabulary: 3 for forward, data gradient and
weight gradient, 2 FLOPs per multiply-add, the QKV and output projections (4 h^2), the MLP (2 h f = 8 h^2), the
two attention products halved by the causal mask (h s / 2 each), the logits (h V). Times B s tokens per iteration
(B the global batch in sequences) gives *model* FLOPs: ``tflops`` and ``mfu``. With activation checkpointing each
block's forward runs once more in the backward (the head and loss are not checkpointed), which *hardware* FLOPs
count: ``hw_tflops`` and ``hfu`` add ``l * (24 h^2 + 2 h s)`` per token; without it they equal the model figures.
TFLOP/s are per device: FLOPs / (step time * world size). MFU = tflops / peak, HFU = hw_tflops / peak, with the
peak from the config or the device. BigScience's logs used Megatron-DeepSpeed's older formula (Narayanan et al.
2021, eq. 3: the attention square counted in full, the logits at 3/4 of their cost; docs/bloom-training.md, "FLOPs
and MFU", compares the two).
Only global rank 0 writes anything; console lines go to the ``bloomtrain`` logger (bloomtrain.console).

The reader is here too: ``read_metrics`` and ``summarize`` turn ``metrics.jsonl`` into a ``TrainingSummary``
(the flows publish it; a model card reads it). ``metrics.jsonl`` holds one JSON object per logged iteration
(``iteration, loss, tokens_per_s, tflops, mfu`` when the device peak is known, ...), one per evaluation
(``iteration, valid_loss, valid_ppl, valid_best_loss``) and one per named validation set and evaluation
(``iteration, valid/<name>/loss, valid/<name>/ppl, valid/<name>/bpb, valid/<name>/best_loss``; the best: the
lowest loss so far, over resumes). The evaluation records of one iteration are merged
into one. A resumed run appends to the same file, so later records for an iteration replace earlier ones.
torch is imported only where a device is asked about, so reading a run costs no torch import.
"""

from __future__ import annotations

import json
import logging
import resource
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from bloomtrain.config import TrainConfig
from bloomtrain.environment import RunEnvironment, read_environment
from bloomtrain.measures import perplexity
from bloomtrain.model.config import ModelConfig
from bloomtrain.precision import PrecisionChoice

log = logging.getLogger(__name__)

_PEAK_TFLOPS = {"A100": 312.0, "H100": 989.0, "H200": 989.0}  # dense bf16, per device
START_EVENT = "throughput_formula"  # the header every launch writes first (named after its first content)


def flops_per_token(model: ModelConfig, tp: int, recompute: bool) -> float:
    """Model FLOPs of one token's forward and backward (Megatron-LM's count; module docstring), plus one more forward
    of every block when ``recompute`` (hardware FLOPs under activation checkpointing)."""
    s, layers, h, ffn = model.seq_length, model.num_layers, model.hidden_size, model.ffn_hidden_size
    v = model.padded_vocab_size(tp)
    block_forward = 2 * (4 * h * h + 2 * h * ffn + h * s)  # projections, MLP, the causal half of QK^T and PV
    return float(layers * block_forward * (4 if recompute else 3) + 3 * 2 * h * v)


def flops_per_iteration(model: ModelConfig, global_batch: int, tp: int, recompute: bool) -> float:
    """``flops_per_token`` times the iteration's ``global_batch * seq_length`` tokens."""
    return float(flops_per_token(model, tp, recompute) * global_batch * model.seq_length)


def device_peak_tflops(configured: float | None) -> float | None:
    import torch  # noqa: PLC0415 - readers of metrics.jsonl never pay for torch

    if configured is not None:
        return configured
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name()
        return next((peak for key, peak in _PEAK_TFLOPS.items() if key in name), None)
    return None


def memory_gib() -> float:
    """Peak device memory (CUDA) or peak resident set size of this process (CPU), GiB."""
    import torch  # noqa: PLC0415

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

    def describe(self, start_iteration: int = 0, precision: PrecisionChoice | None = None) -> None:
        """Write the launch's header (``START_EVENT``) once, first: the throughput formula (also on the console),
        the wall-clock time, the iteration the launch starts after, its hardware and software (rank 0), and the
        precision it runs in and why (also on the console, first; ``read_precision``)."""
        recompute = self.cfg.parallel.activation_checkpointing
        hardware = ("add l*(24h^2 + 2hs) per token for the recomputed block forwards" if recompute
                    else "equal them (no recomputation)")
        text = ("tflops/mfu: model FLOPs per token l*(72h^2 + 6hs) + 6hV (Megatron-LM's count: causal attention "
                "halved, forward + backward = 3x) x tokens per iteration / (step time * world * 1e12), recomputation "
                f"NOT counted; hw_tflops/hfu {hardware}; peak {self.peak or 'unknown'} TFLOP/s per device")
        if not self.enabled:
            return
        record = {"event": START_EVENT, "text": text, "time": round(time.time(), 3),
                  "start_iteration": start_iteration, "environment": read_environment(self.world).model_dump(),
                  **({"precision": precision.model_dump()} if precision is not None else {})}
        if precision is not None:
            log.info("bloomtrain: %s", precision.line())
        self.log(record, 0, f"bloomtrain: {text}")

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
            out["hfu"] = out["hw_tflops"] / self.peak
        return out

    def log(self, record: dict[str, Any], step: int, console: str | None = None) -> None:
        if not self.enabled:
            return
        if self._jsonl is not None:
            self._jsonl.write(json.dumps(record) + "\n")
        if self._tb is not None and "event" not in record:
            for key, value in record.items():
                if isinstance(value, int | float) and key not in ("iteration", "time"):
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


# --- reading metrics.jsonl ----------------------------------------------------------------------------------


def read_metrics(path: str | Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training records, evaluation records), each sorted by iteration, last write wins; [] if absent.

    An iteration's evaluation record holds ``valid_loss``/``valid_ppl`` and every ``valid/<name>/*`` logged
    for it (the trainer writes one record per set)."""
    train: dict[int, dict[str, Any]] = {}
    evals: dict[int, dict[str, Any]] = {}
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return [], []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill: the rest of the file is still good
        if not isinstance(rec, dict) or "iteration" not in rec:
            continue
        if "valid_loss" in rec or any(k.startswith("valid/") for k in rec):
            evals.setdefault(rec["iteration"], {}).update(rec)
        elif "loss" in rec:
            train[rec["iteration"]] = rec
    return [train[k] for k in sorted(train)], [evals[k] for k in sorted(evals)]


class SetPoint(BaseModel):
    """One named validation set at one evaluation (a metric the record lacks is None)."""

    iteration: int
    loss: float | None = None
    ppl: float | None = None
    bpb: float | None = None


def set_curves(evals: list[dict[str, Any]]) -> dict[str, list[SetPoint]]:
    """Per named validation set, its evaluations in iteration order."""
    curves: dict[str, list[SetPoint]] = {}
    for rec in evals:
        points: dict[str, dict[str, float]] = {}
        for key, value in rec.items():
            parts = key.split("/")
            if len(parts) == 3 and parts[0] == "valid":
                points.setdefault(parts[1], {"iteration": rec["iteration"]})[parts[2]] = value
        for name, point in points.items():
            curves.setdefault(name, []).append(SetPoint.model_validate(point))
    return curves


class TrainingSummary(BaseModel):
    """A run's headline numbers from its metrics.jsonl (``summarize``)."""

    iterations: int
    final_loss: float
    perplexity: float  # of final_loss
    consumed_tokens: int | None = None
    tokens_per_s: float | None = None  # median over the last logged iterations (warm-up excluded)
    tflops: float | None = None  # per device
    mfu: float | None = None  # None without a known device peak (e.g. CPU)
    valid_loss: float | None = None  # the last evaluation
    valid_ppl: float | None = None
    valid_sets: dict[str, SetPoint] = {}  # name -> its last evaluation


def summarize(train: list[dict[str, Any]], evals: list[dict[str, Any]], *, tail: int = 5) -> TrainingSummary | None:
    """Final loss and perplexity, median throughput over the last ``tail`` logged iterations (skipping the
    first, which pays for warm-up), MFU when the trainer could compute it, validation loss/ppl when run, and
    each named validation set's last evaluation; None for a run that logged no iteration."""
    if not train:
        return None
    last = train[-1]
    steady = train[1:][-tail:] or train[-tail:]

    def median(key: str) -> float | None:
        values = sorted(r[key] for r in steady if isinstance(r.get(key), int | float))
        return values[len(values) // 2] if values else None

    overall = [r for r in evals if "valid_loss" in r]
    valid_loss = overall[-1]["valid_loss"] if overall else None
    return TrainingSummary(
        iterations=last["iteration"], final_loss=last["loss"], perplexity=perplexity(last["loss"]),
        consumed_tokens=last.get("consumed_tokens"), tokens_per_s=median("tokens_per_s"), tflops=median("tflops"),
        mfu=median("mfu"), valid_loss=valid_loss,
        valid_ppl=None if valid_loss is None else overall[-1].get("valid_ppl", perplexity(valid_loss)),
        valid_sets={name: points[-1] for name, points in sorted(set_curves(evals).items())})


# --- launches: wall time and hardware ------------------------------------------------------------------------


class Launch(BaseModel):
    """One launch of the trainer as metrics.jsonl records it: its header (``START_EVENT``) and the wall-clock
    time of the last iteration it logged (within the bound ``read_launches`` was given)."""

    start: float  # unix time of the header (after the resume, before the first iteration)
    end: float | None = None  # unix time of its last logged iteration; None when it logged none
    start_iteration: int  # the iteration it resumed after (0: a fresh run)
    last_iteration: int | None = None
    environment: RunEnvironment
    precision: PrecisionChoice | None = None  # what it ran in and why (None: a header without it)

    @property
    def seconds(self) -> float:
        """Wall time of its training loop: header to last logged iteration (0 when it logged none)."""
        return 0.0 if self.end is None else self.end - self.start


def read_launches(path: str | Path, until_iteration: int | None = None) -> list[Launch]:
    """Every launch recorded in ``metrics.jsonl``, in file order, counting iterations up to ``until_iteration``
    (an exported checkpoint's); launches from before headers carried time and hardware are left out."""
    launches: list[Launch] = []
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    current: Launch | None = None
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(rec, dict):
            continue
        if rec.get("event") == START_EVENT:
            current = None
            if "time" in rec and "environment" in rec:
                current = Launch(start=rec["time"], start_iteration=rec.get("start_iteration", 0),
                                 environment=RunEnvironment.model_validate(rec["environment"]),
                                 precision=rec.get("precision"))
                launches.append(current)
        elif current is not None and "loss" in rec and "time" in rec:
            if until_iteration is None or rec["iteration"] <= until_iteration:
                current.end, current.last_iteration = rec["time"], rec["iteration"]
    return [launch for launch in launches if until_iteration is None or launch.start_iteration < until_iteration]


def read_precision(path: str | Path) -> PrecisionChoice | None:
    """The precision the last launch of a run's ``metrics.jsonl`` ran in (its header's), or None."""
    launches = read_launches(path)
    return launches[-1].precision if launches else None
