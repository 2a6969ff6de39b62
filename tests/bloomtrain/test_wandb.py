"""``logging.wandb``: a tiny training run logs its losses and config to Weights & Biases in offline mode, and its
resumed run continues the same W&B run id; without the package, one line says so."""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import pytest

from bloomdata.errors import BloomstackError
from bloomtrain.callbacks.tracking import require_wandb
from bloomtrain.config import load_config
from bloomtrain.metrics import read_metrics
from tests.bloomtrain.train_helpers import EXACT, TINY, train_rank
from tests.harness.gloo_harness import run_distributed

pytest.importorskip("wandb")


def _records(path: Path) -> list[bytes]:
    """The records of a W&B transaction log (``run-<id>.wandb``): a 7-byte header (``:W&B``, magic, version),
    then LevelDB's log format: 32 KiB blocks of records, each with a 7-byte header (crc32, length, type: 1 full,
    2 first, 3 middle, 4 last)."""
    data, out, pending, pos, block = path.read_bytes(), [], b"", 7, 32768
    assert data[:4] == b":W&B", path
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            out.append(pending)
            pending = b""
    return out


def _read_run(run_dir: Path) -> tuple[str, dict[int, float], dict]:
    """(run id, loss per iteration, config) of one offline run directory."""
    from wandb.proto import wandb_internal_pb2 as pb

    [log] = run_dir.glob("run-*.wandb")
    run_id, losses, config = "", {}, {}

    def items(update) -> dict:
        return {i.key or ".".join(i.nested_key): json.loads(i.value_json) for i in update}

    for data in _records(log):
        record = pb.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_id = record.run.run_id
            config.update(items(record.run.config.update))
        elif kind == "config":
            config.update(items(record.config.update))
        elif kind == "history":
            logged = items(record.history.item)
            if "loss" in logged:
                losses[int(logged["iteration"])] = logged["loss"]
    return run_id, losses, config


def _run(tmp_path: Path, iters: int) -> dict:
    overrides = [*EXACT, f"schedule.train_iters={iters}", f"checkpoint.dir={tmp_path / 'ckpt'}",
                 "checkpoint.save_interval=3", f"logging.dir={tmp_path / 'logs'}",
                 f"logging.wandb={{project: bloom-test, name: tiny, mode: offline, dir: {tmp_path / 'wb'}}}"]
    return run_distributed(train_rank, 1, overrides, timeout_s=300)[0]


@pytest.mark.integration
def test_offline_run_holds_the_losses_and_config_and_a_resume_continues_it(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    first = _run(tmp_path, 3)  # saves at iteration 3 and ends
    resumed = _run(tmp_path, 5)  # resumes there
    assert first["error"] is None and resumed["error"] is None, (first["error"], resumed["error"])
    runs = sorted((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(runs) == 2, runs
    (id1, losses1, config1), (id2, losses2, _) = (_read_run(r) for r in runs)
    assert id1 == id2 and len(id1) == 8  # the resumed launch continues the same W&B run
    train, _ = read_metrics(tmp_path / "logs" / "metrics.jsonl")
    assert {**losses1, **losses2} == {r["iteration"]: r["loss"] for r in train}  # what metrics.jsonl holds
    assert sorted(losses1) == [1, 2, 3] and sorted(losses2) == [4, 5]
    assert config1["optim"]["lr"] == 1e-2 and config1["schedule"]["train_iters"] == 3
    assert config1["logging"]["wandb"]["project"] == "bloom-test"


def test_a_missing_wandb_package_is_one_line(monkeypatch):
    cfg = load_config(TINY, ["logging.wandb={mode: offline}"])
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(BloomstackError, match=r"^logging.wandb is set but the wandb package is not installed: "
                                              r"pip install 'bloomstack\[wandb\]', or remove logging.wandb$"):
        require_wandb(cfg)
    require_wandb(load_config(TINY, []))  # not asked for: nothing to say


def test_a_run_w_and_b_cannot_start_is_one_line(tmp_path, monkeypatch):
    """Online without an API key (a fresh HOME, no WANDB_API_KEY): a config error naming the fix, not a traceback."""
    from bloomtrain.callbacks.tracking import WandbCallback

    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "config"))
    cfg = load_config(TINY, ["logging.wandb={project: p, mode: online}"])
    callback = WandbCallback(cfg.logging.wandb, cfg, rank=0)
    with pytest.raises(BloomstackError, match=r"^logging.wandb: W&B could not start run [0-9a-f]{8} in project p "
                                              r"\(.*API key.*\); run `wandb login` or set WANDB_API_KEY"):
        callback.pre_train(None)  # type: ignore[arg-type] # the trainer is not read


class _Sink:
    """Stands in for both a TensorBoard SummaryWriter and a W&B run: what each was given, per step."""

    def __init__(self) -> None:
        self.got: dict[int, dict[str, float]] = {}

    def add_scalar(self, key: str, value: float, step: int) -> None:
        self.got.setdefault(step, {})[key] = value

    def log(self, values: dict[str, float]) -> None:
        self.got.setdefault(int(values["iteration"]), {}).update(
            {k: v for k, v in values.items() if k != "iteration"})


def test_w_and_b_gets_every_number_tensorboard_gets():
    """The records of an iteration, an evaluation with per-language sets and a launch header, through
    bloomtrain.metrics.Metrics (TensorBoard) and the W&B callback: the same numbers at the same iterations."""
    from bloomtrain.callbacks.tracking import WandbCallback
    from bloomtrain.metrics import Metrics

    cfg = load_config(TINY, ["logging.wandb={mode: offline}"])
    records = [
        ({"event": "throughput_formula", "text": "...", "time": 1.0, "start_iteration": 0}, 0),
        ({"iteration": 10, "loss": 2.5, "lr": 1e-3, "grad_norm": 0.7, "tokens_per_s": 900.0, "tflops": 0.01,
          "mfu": 0.4, "skipped_iters": 0, "loss_spike": False, "time": 1234.5}, 10),
        ({"iteration": 10, "valid_loss": 2.6, "valid_ppl": 13.5, "valid/fr/loss": 2.4, "valid/fr/ppl": 11.0,
          "valid/fr/bpb": 1.2, "valid/sw/loss": 2.9, "valid/sw/ppl": 18.2, "valid/sw/bpb": 1.4}, 10),
    ]
    metrics = Metrics(cfg, rank=0, world_size=1)
    metrics._tb = tensorboard = _Sink()
    callback = WandbCallback(cfg.logging.wandb, cfg, rank=0)
    callback.run = wandb_run = _Sink()
    for record, step in records:
        metrics.log(record, step)
        callback.log_metrics(None, record, step, None)  # type: ignore[arg-type] # the trainer is not read
    assert wandb_run.got == tensorboard.got
    assert wandb_run.got[10]["valid/sw/bpb"] == 1.4 and wandb_run.got[10]["mfu"] == 0.4
