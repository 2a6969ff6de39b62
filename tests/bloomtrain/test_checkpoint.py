"""Checkpoints that survive crashes: SIGKILL at seeded steps, SIGTERM, kill switch, keep-last-K, NaN skips.

Kills inside a save, on either rank of a 2-rank run, are in test_checkpoint_faults.py.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from bloomtrain.checkpoint.format import load_merged_states
from bloomtrain.checkpoint.tags import commit_tag, prune, read_latest
from bloomtrain.metrics import read_launches
from bloomtrain.provenance import read_training_record
from tests.bloomtrain.train_helpers import EXACT, FORCE_BF16, TINY, train_rank
from tests.harness.gloo_harness import run_distributed, start_ranks

ROOT = Path(__file__).resolve().parents[2]


def _ckpt(tmp: Path, iters: int = 6) -> list[str]:
    return [*EXACT, f"schedule.train_iters={iters}", f"checkpoint.dir={tmp}", "checkpoint.save_interval=1",
            "checkpoint.keep_last=2", f"logging.dir={tmp / 'logs'}"]


def _records(log_dir: Path) -> list[dict]:
    path = log_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _wait_for_iteration(log_dir: Path, iteration: int, ended, timeout: float = 120.0) -> None:
    """Poll metrics.jsonl until ``iteration`` was logged; ``ended()`` says the training is gone."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(r.get("iteration", 0) >= iteration for r in _records(log_dir)):  # header has none
            return
        if ended():
            raise AssertionError("training ended before the signal could be sent")
        time.sleep(0.01)
    raise AssertionError(f"iteration {iteration} not reached in {timeout}s")


def _one(overrides: list[str]) -> dict:
    return run_distributed(train_rank, 1, overrides, timeout_s=300)[0]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """8 uninterrupted iterations, saving every iteration."""
    r = _one(_ckpt(tmp_path_factory.mktemp("baseline"), iters=8))
    assert r["error"] is None, r["error"]
    return r


KILL_AFTER = random.Random(8).sample(range(2, 6), 2)  # logged iterations to SIGKILL after: fixed, seeded


@pytest.mark.integration
@pytest.mark.parametrize("kill_at", KILL_AFTER)
def test_sigkill_at_a_step_then_resume_reproduces_the_losses_exactly(tmp_path, baseline, kill_at):
    run_dir = tmp_path / "b"
    # the same run but open-ended (the length only decides when to stop), so it is still going when killed
    ranks = start_ranks(train_rank, 1, _ckpt(run_dir, iters=10000), timeout_s=300)
    _wait_for_iteration(run_dir / "logs", kill_at, lambda: not ranks.alive())
    os.kill(ranks.pids[0], signal.SIGKILL)
    assert ranks.wait()[0].exitcode == -signal.SIGKILL
    saved = read_latest(run_dir)
    assert saved is not None  # at least global_step1 was complete

    resumed = _one(_ckpt(run_dir, iters=8))
    assert resumed["error"] is None, resumed["error"]
    first = int(saved.removeprefix("global_step")) + 1
    assert first <= 8 and min(resumed["losses"]) == first
    for it in range(first, 9):
        assert resumed["losses"][it] == baseline["losses"][it], it  # bitwise: fp32 on CPU
    assert resumed["position"] == baseline["position"]
    steps = sorted(p.name for p in run_dir.iterdir() if p.name.startswith("global_step"))
    assert steps == ["global_step7", "global_step8"]  # keep_last=2
    assert read_latest(run_dir) == "global_step8"


@pytest.mark.integration
def test_sigterm_saves_a_checkpoint_and_exits_zero_then_kill_switch(tmp_path):
    ckpt, logs = tmp_path / "ckpt", tmp_path / "logs"
    cmd = [sys.executable, "-m", "bloomtrain.cli", "train", "--config", str(TINY), *EXACT,
           "schedule.train_iters=10000", f"checkpoint.dir={ckpt}", "checkpoint.save_interval=null",
           f"logging.dir={logs}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_iteration(logs, 2, lambda: proc.poll() is not None, timeout=240)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert "stopping at iteration" in out and "signal SIGTERM" in out
    header, *records = _records(logs)  # one header per launch, its precision in it
    assert (header["precision"]["configured"], header["precision"]["ran"]) == ("fp32", "fp32")
    assert header["event"] == "throughput_formula" and "recomputation NOT counted" in header["text"]
    last = max(r["iteration"] for r in records)
    assert {"loss", "lr", "grad_norm", "consumed_samples", "consumed_tokens", "tokens_per_s", "tflops",
            "hw_tflops", "memory_gib", "step_time_s", "skipped_iters"} <= set(records[0])
    assert records[1]["consumed_tokens"] == 16 * 32
    assert list((logs / "tensorboard").glob("events.out.tfevents.*"))
    assert "iter 2/10000 | samples 16 | loss" in out
    tag = read_latest(ckpt)
    assert tag == f"global_step{last}"
    files = {p.name for p in (ckpt / tag).iterdir()}
    # spec indices: 1 embedding, 3..4 blocks, 6 final LN; the tied head (7) is never saved
    assert {"layer_01-model_00-model_states.pt", "layer_03-model_00-model_states.pt",
            "layer_04-model_00-model_states.pt", "layer_06-model_00-model_states.pt",
            "mp_rank_00_model_states.pt", "bloomtrain_model.json"} <= files
    assert not any(name.startswith("layer_07") for name in files)
    # the model files are readable by the export path (bloomtrain.checkpoint.format)
    config, merged = load_merged_states(ckpt)
    assert set(merged[1]) == {"word_embeddings.weight", "word_embeddings.norm.weight", "word_embeddings.norm.bias"}
    assert config.num_layers == 2
    # what a model card reads: the tag's training record and the launch's header (time, hardware, software)
    record = read_training_record(ckpt, tag)
    assert (record.iteration, record.consumed_samples, record.world_size) == (last, records[-1]["consumed_samples"], 1)
    assert record.train_config.logging.dir == str(logs) and record.metrics_file == logs / "metrics.jsonl"
    (launch,) = read_launches(logs / "metrics.jsonl")
    assert launch.start_iteration == 0 and launch.last_iteration == last and launch.end == records[-1]["time"]
    assert launch.environment.device == "cpu" and launch.environment.processes == 1
    assert launch.environment.software["torch"] == torch.__version__ and 0 < launch.seconds < 240

    # a kill-switch file stops the resumed run after one more iteration, with a checkpoint
    switch = tmp_path / "KILL"
    switch.touch()
    r = _one([*EXACT, "schedule.train_iters=10000", f"checkpoint.dir={ckpt}", f"checkpoint.kill_switch_path={switch}"])
    assert r["error"] is None, r["error"]
    assert list(r["losses"]) == [last + 1]
    assert read_latest(ckpt) == f"global_step{last + 1}"


@pytest.mark.integration
@pytest.mark.parametrize("precision", [["optim.precision=fp32"], FORCE_BF16], ids=["fp32", "bf16"])
def test_injected_nan_is_skipped_and_counted(precision):
    r = _one([*EXACT, *precision, "schedule.train_iters=4", "stability.inject_nan_at_iters=[2]"])
    assert r["error"] is None, r["error"]
    assert math.isnan(r["losses"][2])
    assert all(math.isfinite(r["losses"][i]) for i in (1, 3, 4))
    assert r["skipped_steps"] == 1  # DeepSpeed's own counter agrees
    pos = r["position"]
    assert pos["skipped_iters"] == 1 and pos["consumed_samples"] == 32 and pos["scheduled_samples"] == 24


@pytest.mark.integration
def test_consecutive_non_finite_steps_save_and_stop(tmp_path):
    r = _one([*EXACT, "schedule.train_iters=6", "stability.inject_nan_at_iters=[2, 3]",
              "stability.max_consecutive_skips=2", f"checkpoint.dir={tmp_path}"])
    assert r["error"] is not None and "2 consecutive iterations" in r["error"]
    assert read_latest(tmp_path) == "global_step3"


def test_latest_is_replaced_atomically_and_prune_keeps_the_newest(tmp_path):
    for step in (1, 2, 3, 10):
        (tmp_path / f"global_step{step}").mkdir()
    commit_tag(tmp_path, "global_step10")
    assert read_latest(tmp_path) == "global_step10"
    assert not list(tmp_path.glob("latest?*"))  # no temp file left behind
    assert prune(tmp_path, 2, protect="global_step10") == ["global_step2", "global_step1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["global_step10", "global_step3", "latest"]


@pytest.mark.integration
def test_sigusr1_and_the_time_limit_also_save_and_stop(tmp_path):
    run_dir = tmp_path / "usr1"
    ranks = start_ranks(train_rank, 1, [*EXACT, "schedule.train_iters=10000", f"checkpoint.dir={run_dir}",
                                        f"logging.dir={run_dir / 'logs'}"], timeout_s=120)
    _wait_for_iteration(run_dir / "logs", 1, lambda: not ranks.alive())
    os.kill(ranks.pids[0], signal.SIGUSR1)
    outcome = ranks.wait()[0]
    assert outcome.exitcode == 0 and outcome.value["error"] is None, outcome
    last = max(r.get("iteration", 0) for r in _records(run_dir / "logs"))
    assert read_latest(run_dir) == f"global_step{last}"

    r = _one([*EXACT, "schedule.train_iters=10000", f"checkpoint.dir={tmp_path / 'timed'}",
              "checkpoint.exit_duration_in_mins=1e-6"])
    assert r["error"] is None and list(r["losses"]) == [1]
    assert read_latest(tmp_path / "timed") == "global_step1"


@pytest.mark.integration
@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs CUDA")
def test_cli_trains_saves_and_resumes_on_gpu(tmp_path):
    """The same CLI on one GPU (DeepSpeed's CUDA accelerator, NCCL, bf16): train, save, resume."""
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    base = [sys.executable, "-m", "bloomtrain.cli", "train", "--config", str(TINY), "optim.precision=bf16",
            f"checkpoint.dir={tmp_path}"]
    for iters in (2, 4):
        out = subprocess.run([*base, f"schedule.train_iters={iters}"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        assert f"done at iteration {iters}" in out.stdout
    assert read_latest(tmp_path) == "global_step4"
