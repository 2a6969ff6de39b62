"""Digests on every checkpoint: a damaged file is found before any tensor is read, named in one line, and the run
resumes from the newest earlier checkpoint whose files all verify, bit for bit.

The run is 2 CPU ranks with ZeRO-1 over DP (bf16, so each rank writes its own optimizer shard and RNG file;
dropout on). Its newest of three checkpoints is damaged three ways: one byte of a model-state file flipped, an
optimizer file truncated, an RNG file deleted. Each time `bloomtrain verify` exits 1 naming the file and the kind of
damage, and the resumed run says what it found, resumes from the checkpoint before, and its losses equal an
uninterrupted run's from there. ``checkpoint.on_corrupt=fail`` stops instead (one line, exit 2, never restarted),
and checkpoints saved before digests were recorded still load, with one line saying so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bloomtrain.checkpoint.manifest import MANIFEST_FILE
from bloomtrain.checkpoint.tags import commit_tag, read_latest, tag_for
from bloomtrain.cli import main as bloomtrain_main
from bloomtrain.exit_record import attempts, read_attempt
from tests.bloomtrain.train_helpers import EXACT, FORCE_BF16, TINY, train_rank
from tests.harness.gloo_harness import run_distributed

pytestmark = pytest.mark.integration  # tests/tiers.py

ROOT = Path(__file__).resolve().parents[2]
ITERS = 5
NEWEST = 3  # the newest of the three checkpoints the damaged run has
RUN = [*EXACT, *FORCE_BF16, f"schedule.train_iters={ITERS}", "checkpoint.save_interval=1", "checkpoint.keep_last=null",
       "model.hidden_dropout=0.1", "model.attention_dropout=0.1", "logging.tensorboard=false"]


def _run(ckpt: Path, *extra: str) -> list[dict]:
    results = run_distributed(train_rank, 2, [*RUN, f"checkpoint.dir={ckpt}", *extra], timeout_s=300)
    for r in results:
        assert r["error"] is None, r["error"]
    return results


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> tuple[Path, list[dict]]:
    """The uninterrupted run, every checkpoint kept."""
    ckpt = tmp_path_factory.mktemp("baseline")
    return ckpt, _run(ckpt)


def _three_checkpoints(baseline_dir: Path, ckpt: Path) -> None:
    """The run as it was after iteration NEWEST: its checkpoints 1..NEWEST, ``latest`` naming the newest."""
    ckpt.mkdir()
    for i in range(1, NEWEST + 1):
        shutil.copytree(baseline_dir / tag_for(i), ckpt / tag_for(i))
    commit_tag(ckpt, tag_for(NEWEST))


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(data)


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


DAMAGES = {  # what is done to which file of the newest checkpoint; the kind of damage the line names
    "flip-a-byte-of-a-model-state-file": ("layer_03-model_00-model_states.pt", _flip, "damaged (content)"),
    "truncate-an-optimizer-file": ("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", _truncate, "damaged (size)"),
    "delete-an-rng-file": ("rng/rank_00001.pt", Path.unlink, "missing"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_newest_checkpoint_resumes_from_the_previous_one(tmp_path, baseline, capfd, damage):
    baseline_dir, expected = baseline
    name, do, kind = DAMAGES[damage]
    ckpt = tmp_path / "ckpt"
    _three_checkpoints(baseline_dir, ckpt)
    damaged = ckpt / tag_for(NEWEST) / name
    do(damaged)

    capfd.readouterr()
    assert bloomtrain_main(["verify", str(ckpt)]) == 1
    lines = capfd.readouterr().out.splitlines()
    assert lines[0].startswith(f"{tag_for(NEWEST)}: DAMAGED: {damaged}: {kind}: "), lines
    assert [line.split(" (")[0] for line in lines[1:3]] == [f"{tag_for(2)}: ok", f"{tag_for(1)}: ok"]
    assert lines[3].endswith("2 of 3 checkpoint(s) with digests verify; damaged: global_step3")

    results = _run(ckpt)
    said = [line for line in capfd.readouterr().out.splitlines() if line.startswith("bloomtrain: ")]
    assert [line for line in said if "verify" in line] == [
        f"bloomtrain: {damaged}: {kind}: {_detail(lines[0])}; resuming from {tag_for(NEWEST - 1)}, the newest earlier "
        "checkpoint whose files all verify (checkpoint.on_corrupt=previous)"]
    for got, want in zip(results, expected):
        assert sorted(got["losses"]) == list(range(NEWEST, ITERS + 1))
        for it in got["losses"]:
            assert got["losses"][it] == want["losses"][it], it  # bitwise
        assert got["position"] == want["position"]
    assert read_latest(ckpt) == tag_for(ITERS)
    assert bloomtrain_main(["verify", str(ckpt)]) == 0  # the damaged tag was saved again, whole


def _detail(verify_line: str) -> str:
    """What follows the kind of damage in a `bloomtrain verify` line."""
    return verify_line.split(": ", 4)[4]


def test_on_corrupt_fail_stops_in_one_line_and_is_not_restarted(tmp_path, baseline):
    ckpt = tmp_path / "ckpt"
    _three_checkpoints(baseline[0], ckpt)
    damaged = ckpt / tag_for(NEWEST) / "rng" / "rank_00001.pt"
    damaged.unlink()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "DS_ACCELERATOR": "cpu", "PYTHONUNBUFFERED": "1",
           "BLOOMTRAIN_EXIT_DIR": str(tmp_path / "exits"), "BLOOMTRAIN_NODE": "node0"}
    cmd = [sys.executable, "-m", "bloomtrain.launcher", "--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
           "-m", "bloomtrain.cli", "train", "--config", str(TINY), *RUN, f"checkpoint.dir={ckpt}",
           "checkpoint.on_corrupt=fail"]
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = [line for line in (out.stdout + out.stderr).splitlines() if line.startswith("bloomtrain: node")]
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    assert lines == [
        f"bloomtrain: node node0: rank 0 on node0: damaged checkpoint, not retried: {damaged}: missing: the manifest "
        "lists it (15,717 bytes (15.7 kB), written by rank 1); not resuming (checkpoint.on_corrupt=fail): restore the "
        "file, or set checkpoint.on_corrupt=previous to resume from the newest earlier checkpoint whose files all "
        "verify"]
    assert attempts(tmp_path / "exits") == [0]
    assert {r.kind for r in read_attempt(tmp_path / "exits", 0).ranks.values()} == {"corrupt_checkpoint"}
    assert read_latest(ckpt) == tag_for(NEWEST)  # nothing moved


def test_a_checkpoint_without_digests_loads_with_one_line(tmp_path, baseline, capfd):
    """Saved before digests were recorded: no manifest. It loads unverified, and says so once."""
    baseline_dir, expected = baseline
    ckpt = tmp_path / "ckpt"
    _three_checkpoints(baseline_dir, ckpt)
    for tag in ckpt.glob("global_step*"):
        (tag / MANIFEST_FILE).unlink()
    capfd.readouterr()
    results = _run(ckpt)
    said = [line for line in capfd.readouterr().out.splitlines() if "digests" in line]
    assert said == [f"bloomtrain: {ckpt / tag_for(NEWEST)} carries no digests (saved before bloomtrain recorded them "
                    f"in {MANIFEST_FILE}, or by Megatron-DeepSpeed): loading it unverified"]
    assert sorted(results[0]["losses"]) == [NEWEST + 1, ITERS]
    assert all(results[0]["losses"][it] == expected[0]["losses"][it] for it in (NEWEST + 1, ITERS))
