"""One proxy: a small model trained on one mixture, scored on every dataset's validation documents.

A proxy is an independent job with a durable result. ``plan_proxy`` writes its ``job.json`` (a ``ProxyJob``:
the mixture, the seed, the token count, the full training config, the input fingerprints) into
``OUT/proxies/<key>/``, where ``key`` is ``durable.content_key`` of the job: the same mixture with the same
recipe, data and seed is the same directory, so a rerun, a larger search or a validation run finds its
result there, and any change to them is a new directory, never a stale hit. The job runs as
``python -m bloomtrain.mixture_search.proxy DIR`` (``run_proxy`` starts it and waits; a Dask worker or a
Slurm array task runs the same command), which

1. writes the proxy's blend (``DIR/blend.yaml``: the mixture's datasets with their weights, the search's split,
   the job's seed for the sample order);
2. trains with ``bloomtrain.train.build_trainer`` (the same trainer as ``bloomtrain train``; one process,
   no checkpoints: a killed proxy starts over, it is minutes at most), evaluating every dataset's validation
   set (``data.valid_sets``: bits per byte) once, at the last iteration;
3. writes ``DIR/result.json`` (a ``ProxyResult``) through ``durable.write_marker``: the job's completion marker.

Its console output goes to ``DIR/train.log`` (appended per attempt). The validation sets are the search's
``OUT/valid/<name>.yaml``: one dataset each, with a fixed seed, so every proxy of every mixture and seed reads
exactly the same validation samples and their bits per byte compare.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from bloomdata import durable
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomtrain.callbacks.base import Callback, TrainerView
from bloomtrain.config import TrainConfig

JOB, RESULT, LOG, BLEND = "job.json", "result.json", "train.log", "blend.yaml"
THREADS_ENV = "BLOOMSTACK_PROXY_THREADS"  # the child's torch threads
# launcher variables a proxy must not inherit: it is a one-process run of its own
LAUNCHER_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE")


class ProxyJob(BaseModel):
    """Everything a proxy's result depends on; its content key names its directory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weights: dict[str, float]  # dataset -> weight (0: not drawn)
    seed: int  # the training seed (weights' init, sample order)
    tokens: int  # training tokens (iterations x global batch x seq_length)
    train: TrainConfig  # the full run but data.blend, which is DIR/blend.yaml
    prefixes: dict[str, str]  # dataset -> Megatron prefix
    split: str | None
    train_range: str | None
    valid_range: str | None
    inputs: dict[str, str]  # file -> fingerprint (datasets, tokenizer): rebuilt data is a new job

    @property
    def key(self) -> str:
        return durable.content_key(self)


class ProxyResult(BaseModel):
    """A finished proxy (``DIR/result.json``, after its ``key``)."""

    weights: dict[str, float]
    seed: int
    tokens: int
    bpb: dict[str, float]  # dataset -> validation bits per byte
    seconds: float  # wall time of the training process


def job_dir(proxies_dir: Path, job: ProxyJob) -> Path:
    return proxies_dir / job.key


def write_job(proxies_dir: Path, job: ProxyJob) -> Path:
    """``proxies_dir/<key>/job.json`` (kept when present: same key, same content); returns the directory."""
    path = job_dir(proxies_dir, job)
    path.mkdir(parents=True, exist_ok=True)
    if not (path / JOB).exists():
        durable.write_json(path / JOB, job)
    return path


def read_job(path: str | Path) -> ProxyJob:
    record = durable.read_json(Path(path) / JOB)
    if record is None:
        raise BloomstackError(f"{path}: no readable {JOB}; rerun the search to write it again")
    return ProxyJob.model_validate(record)


def finished(path: str | Path, job: ProxyJob) -> ProxyResult | None:
    """The proxy's result when it finished for this very job; None otherwise."""
    return durable.read_manifest(Path(path) / RESULT, job.key, ProxyResult)


def finish(path: str | Path, job: ProxyJob, bpb: dict[str, float], seconds: float) -> ProxyResult:
    """Record the proxy's result: its completion marker, written last."""
    result = ProxyResult(weights=job.weights, seed=job.seed, tokens=job.tokens, bpb=bpb, seconds=seconds)
    durable.write_marker(Path(path) / RESULT, job.key, result)
    return result


def _last_line(log: Path) -> str:
    try:
        lines = [line.strip() for line in log.read_text(encoding="utf-8", errors="replace").splitlines()]
    except OSError:
        return "(no log)"
    return next((line for line in reversed(lines) if line), "(empty log)")[:300]


def run_proxy(path: str, threads: int = 1) -> ProxyResult:
    """Run the proxy in ``path`` (its job.json written) as a child process with ``threads`` CPU threads,
    unless it already finished. The task the executors run (on a local or Dask worker): it only waits."""
    job = read_job(path)
    if (done := finished(path, job)) is not None:
        return done
    durable.remove_temps(path)  # a killed attempt's, e.g. of blend.yaml
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_ENV}
    env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), **{THREADS_ENV: str(threads)})
    log = Path(path) / LOG
    with log.open("ab") as out:
        out.write(f"=== proxy attempt {time.strftime('%Y-%m-%dT%H:%M:%S')} ===\n".encode())
        out.flush()
        rc = subprocess.run([sys.executable, "-m", "bloomtrain.mixture_search.proxy", str(path)], stdout=out,
                            stderr=subprocess.STDOUT, env=env, check=False).returncode
    if rc != 0 or (done := finished(path, job)) is None:
        raise BloomstackError(f"proxy {path} failed (exit {rc}); the end of {log}: {_last_line(log)}")
    return done


class ValidSetRecorder(Callback):
    """Keeps the last bits per byte the run logged for each validation set (``valid/<name>/bpb``)."""

    def __init__(self) -> None:
        self.bpb: dict[str, float] = {}

    def log_metrics(self, trainer: TrainerView, record: dict[str, Any], step: int, console: str | None) -> None:
        for key, value in record.items():
            if key.startswith("valid/") and key.endswith("/bpb"):
                self.bpb[key[len("valid/"):-len("/bpb")]] = float(value)


def proxy_blend(job: ProxyJob):
    """The proxy's training blend: the datasets it draws from (weight > 0), the search's split, the job's seed."""
    from bloomdata.blend.spec import BlendDataset, BlendSpec  # noqa: PLC0415

    return BlendSpec(seq_length=job.train.model.seq_length, seed=job.seed, split=job.split,
                     train_range=job.train_range, valid_range=job.valid_range,
                     datasets=[BlendDataset(name=n, prefix=job.prefixes[n], weight=w)
                               for n, w in job.weights.items() if w > 0])


def train_proxy(path: Path) -> ProxyResult:
    """In the child: train the proxy of ``path/job.json`` and write its result (see the module docstring)."""
    import torch  # noqa: PLC0415
    import torch.distributed as dist  # noqa: PLC0415

    from bloomtrain.train import build_trainer  # noqa: PLC0415

    job = read_job(path)
    torch.set_num_threads(int(os.environ.get(THREADS_ENV, "1")))
    durable.write_text(path / BLEND, proxy_blend(job).to_yaml())
    cfg = derive(job.train, data=derive(job.train.data, blend=str(path / BLEND)))
    start = time.perf_counter()
    recorder = ValidSetRecorder()
    build_trainer(cfg, callbacks=[recorder]).fit()
    seconds = time.perf_counter() - start
    dist.destroy_process_group()
    missing = sorted(set(job.prefixes) - set(recorder.bpb))
    if missing:
        raise BloomstackError(f"proxy {path}: no validation bits per byte for {', '.join(missing)}")
    return finish(path, job, {n: recorder.bpb[n] for n in job.prefixes}, seconds)


def main(argv: list[str] | None = None) -> int:
    """``python -m bloomtrain.mixture_search.proxy DIR``: train the proxy of DIR/job.json."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bloomtrain.mixture_search.proxy PROXY_DIR", file=sys.stderr)
        return 2
    import torch  # noqa: PLC0415

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        result = train_proxy(Path(args[0]))
    except BloomstackError as exc:
        print(f"bloomtrain mixture-search proxy: error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"proxy done in {result.seconds:.1f} s: " + ", ".join(f"{n} {v:.4f}" for n, v in result.bpb.items()),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
