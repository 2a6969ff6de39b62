"""``ProfileCallback``: torch.profiler around chosen iterations (``logging.profile_iters``), and where their time went.

Why: a step's time alone says that a run is slow, not why. Megatron-LM has ``--profile`` with a step range for
the same purpose. The profiler starts before the first chosen iteration's step and stops right after the
last one's, before the evaluations and saves of that iteration (the highest priority: its ``pre_step`` runs
first, its ``post_train_batch`` first), and each rank in ``logging.profile_ranks`` writes three files to
``logging.dir/profile/``, named ``rank<R>-iters<F>-<L>``:

- ``.trace.json.gz``: the Chrome trace (Perfetto or chrome://tracing open it);
- ``.txt``: torch's table of the ops and kernels by self time;
- ``.summary.json`` (``ProfileSummary``): the time by group (matmul, attention, compiled, loss, elementwise,
  copy, optimizer, communication, other) and the 25 largest rows, beside the profiled steps' wall time. On CUDA the
  rows are the device's kernels, copies and memsets (self device time, no double count); ``busy`` = their sum
  over the wall time: well under 1 means the GPU waited on the host. On a CPU the rows are the operators
  (self CPU time). Groups are read from names (``GROUPS``): a guide, not an accounting.

The profiled iterations run slower (the profiler records every op), so benchmarks time others. A run that
ends or fails inside the range writes what it profiled, in ``close``.
"""

from __future__ import annotations

import gzip
import re
import tempfile
from pathlib import Path

import torch
from pydantic import BaseModel

from bloomdata import durable
from bloomtrain.callbacks.base import PROFILE, Callback, Step, TrainerView

TOP_ROWS = 25

# (group, pattern over the lower-cased name), first match wins: CUDA kernel names (cuBLAS/CUTLASS GEMMs, our
# Triton attention kernels, Inductor's triton_* kernels, NCCL) and the aten operators a CPU profile lists.
GROUPS = (
    ("attention", r"attention|flash|fmha|alibi_?softmax"),
    ("matmul", r"gemm|cutlass|xmma|nvjet|cublas|^aten::(mm|addmm|bmm|baddbmm|matmul|linear)_?$"),
    ("compiled", r"^triton_|compiledfunction|inductor"),
    ("loss", r"head_?loss|cross_?entropy|log_?softmax|nll_loss"),
    ("communication", r"nccl|gloo|all_?reduce|all_?gather|reduce_scatter|broadcast|c10d"),
    ("optimizer", r"adam|multi_tensor|foreach"),
    ("copy", r"memcpy|memset|copy|^aten::(cat|clone|contiguous|to|_to_copy)$"),
    ("elementwise", r"layer_?norm|gelu|softmax|dropout|bernoulli|elementwise|vectorized|reduce"
                    r"|^aten::(add|sub|mul|div|exp|log|sum|mean|neg|pow|sqrt|rsqrt|tanh|where|fill|zero|clamp|"
                    r"masked_fill|amax|max|min)_?$"),
)


class ProfileRow(BaseModel):
    name: str
    ms: float
    """Self time over the profiled iterations."""
    calls: int
    share: float
    """Of the rows' total."""


class ProfileSummary(BaseModel):
    """``rank<R>-iters<F>-<L>.summary.json``."""

    rank: int
    iterations: tuple[int, int]
    device: str
    """``cuda``: rows are device kernels (self device time); ``cpu``: operators (self CPU time)."""
    wall_ms: float
    """The profiled steps' wall time (``step_time_s`` summed)."""
    total_ms: float
    """The rows' self time summed."""
    busy: float | None
    """CUDA: total_ms / wall_ms, the share of the steps the device computed or copied."""
    groups: dict[str, float]
    """Milliseconds by group, largest first."""
    top: list[ProfileRow]

    def headline(self, groups: int | None = None) -> str:
        """``device busy 80% of 1000 ms; matmul 500.0 ms, ...`` (the first ``groups`` groups; all: None)."""
        busy = f"device busy {self.busy:.0%} of {self.wall_ms:.0f} ms; " if self.busy is not None else ""
        return busy + ", ".join(f"{g} {ms:.1f} ms" for g, ms in list(self.groups.items())[:groups])


def profiler_for(on_cuda: bool) -> torch.profiler.profile:
    """A profiler of the host's operators, and of the device's kernels, copies and memsets on CUDA."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return torch.profiler.profile(activities=activities)


def group_of(name: str) -> str:
    lower = name.lower()
    return next((group for group, pattern in GROUPS if re.search(pattern, lower)), "other")


def summarize(averages, rank: int, iterations: tuple[int, int], on_cuda: bool, wall_s: float) -> ProfileSummary:
    """``averages``: the profiler's ``key_averages()``."""
    if on_cuda:
        rows = [(e.key, e.self_device_time_total, e.count) for e in averages
                if e.device_type == torch.autograd.DeviceType.CUDA]
    else:
        rows = [(e.key, e.self_cpu_time_total, e.count) for e in averages if not e.is_user_annotation]
    rows = [(name, us / 1000, calls) for name, us, calls in rows if us > 0]
    total = sum(ms for _, ms, _ in rows)
    groups: dict[str, float] = {}
    for name, ms, _ in rows:
        group = group_of(name)
        groups[group] = groups.get(group, 0.0) + ms
    top = sorted(rows, key=lambda r: -r[1])[:TOP_ROWS]
    wall_ms = wall_s * 1000
    return ProfileSummary(
        rank=rank, iterations=iterations, device="cuda" if on_cuda else "cpu", wall_ms=round(wall_ms, 3),
        total_ms=round(total, 3), busy=round(total / wall_ms, 4) if on_cuda and wall_ms else None,
        groups={g: round(ms, 3) for g, ms in sorted(groups.items(), key=lambda kv: -kv[1])},
        top=[ProfileRow(name=n, ms=round(ms, 3), calls=c, share=round(ms / total, 4)) for n, ms, c in top])


def profile_stem(out_dir: Path, rank: int, iterations: tuple[int, int]) -> Path:
    """The common path of one rank's profile files, without their suffixes."""
    return out_dir / f"rank{rank}-iters{iterations[0]}-{iterations[1]}"


class ProfileCallback(Callback):
    priority = PROFILE

    def __init__(self, iterations: tuple[int, int], out_dir: str | Path, rank: int) -> None:
        self.iterations = iterations
        self.out_dir = Path(out_dir)
        self.rank = rank
        self.on_cuda = False  # the engine's device, read when the profile starts
        self.profiler: torch.profiler.profile | None = None
        self.first = self.last = 0  # the iterations profiled so far
        self.wall_s = 0.0

    def pre_step(self, trainer: TrainerView, step: Step) -> None:
        first, last = self.iterations
        if self.profiler is None and not self.last and first <= step.iteration <= last:
            self.on_cuda = torch.device(trainer.module.engine.device).type == "cuda"
            self.first = step.iteration
            profiler = profiler_for(self.on_cuda)
            try:
                profiler.start()
            except RuntimeError as exc:  # no CUPTI, another profiler running: the run goes on unprofiled
                self.last = step.iteration
                self._failed(trainer, exc)
                return
            self.profiler = profiler

    def post_train_batch(self, trainer: TrainerView, step: Step) -> None:
        if self.profiler is None:
            return
        self.last = step.iteration
        self.wall_s += step.out.step_time_s
        if step.iteration >= self.iterations[1]:
            self._finish(trainer)

    def close(self, trainer: TrainerView) -> None:
        if self.profiler is not None:  # the run ended (or failed) inside the range
            self._finish(trainer)

    def _failed(self, trainer: TrainerView, exc: BaseException) -> None:
        trainer.log({"iteration": self.last, "profile_error": f"{type(exc).__name__}: {exc}"}, self.last,
                    f"bloomtrain: no profile of iterations {self.first}-{self.last} (rank {self.rank}): "
                    f"{type(exc).__name__}: {exc}; training goes on")

    def _finish(self, trainer: TrainerView) -> None:
        """Stop the profiler and write the files; a failure (a full disk, the profiler's own) is one line: a
        diagnostic never ends the run."""
        profiler, self.profiler = self.profiler, None
        assert profiler is not None
        self.last = self.last or self.first
        try:
            self._write(trainer, profiler)
        except (RuntimeError, OSError) as exc:
            self._failed(trainer, exc)

    def _write(self, trainer: TrainerView, profiler: torch.profiler.profile) -> None:
        if self.on_cuda:
            torch.cuda.synchronize()  # kernels still queued belong to the profiled steps
        profiler.stop()
        span = (self.first, self.last)
        stem = profile_stem(self.out_dir, self.rank, span)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        averages = profiler.key_averages()
        summary = summarize(averages, self.rank, span, self.on_cuda, self.wall_s)
        sort = "self_device_time_total" if self.on_cuda else "self_cpu_time_total"
        durable.write_text(stem.with_suffix(".txt"), averages.table(sort_by=sort, row_limit=60) + "\n", fsync=False)
        with tempfile.TemporaryDirectory(dir=self.out_dir) as tmp:
            raw = Path(tmp) / "trace.json"
            profiler.export_chrome_trace(str(raw))
            durable.write_with(stem.with_suffix(".trace.json.gz"),
                               lambda f: f.write(gzip.compress(raw.read_bytes(), compresslevel=6)), fsync=False)
        durable.write_text(stem.with_suffix(".summary.json"), summary.model_dump_json(indent=1) + "\n", fsync=False)
        trainer.log({"iteration": span[1], "profile": str(stem) + ".*", "profile_iters": list(span)}, span[1],
                    f"bloomtrain: profile of iterations {span[0]}-{span[1]} (rank {self.rank}) written to {stem}.*: "
                    f"{summary.headline(groups=4)}")


def profile_callbacks(iterations: tuple[int, int] | None, ranks: tuple[int, ...], log_dir: str | None,
                      rank: int) -> list[Callback]:
    """The run's profile callback, if ``logging.profile_iters`` is set and this rank profiles."""
    if iterations is None or rank not in ranks:
        return []
    assert log_dir is not None  # LoggingConfig: profile_iters needs logging.dir
    return [ProfileCallback(iterations, Path(log_dir) / "profile", rank)]

