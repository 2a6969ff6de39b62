"""``bloomtrain slurm``: a tr11-style sbatch script, validated against the config before queueing, that
requeues itself. The recovery decisions are checked by running the script itself under a fake Slurm
(``srun`` plays one attempt of the training: it may save a checkpoint, sleep, exit with a code)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bloomdata.errors import BloomstackError
from bloomtrain.cli.slurm import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "train" / "bloom-176b-tr11.yaml"
TINY = ROOT / "configs" / "train" / "tiny-cpu.yaml"


def test_tr11_script(tmp_path, capsys):
    out = tmp_path / "tr11.slurm"
    assert main(["--config", str(CONFIG), "--nodes", "48", "--time", "100:00:00", "--out", str(out),
                 "--sbatch=--partition=gpu_p5", "--exclude", "jean-zay-iam34", "--exclude", "jean-zay-iam[35-36]",
                 "optim.lr=5e-5"]) == 0
    script = out.read_text()
    for needle in ["#SBATCH --nodes=48", "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:8",
                   "#SBATCH --partition=gpu_p5", "(TP 4 x PP 12 x DP 8)", "--rdzv_backend c10d",
                   "--nproc_per_node 8", "--node_rank \"$SLURM_PROCID\"", "-m bloomtrain.cli train --config",
                   "optim.lr=5e-5", "#SBATCH --requeue ", "#SBATCH --open-mode=append",
                   "#SBATCH --exclude=jean-zay-iam34,jean-zay-iam[35-36]\n", "--max_restarts 3\n",
                   "export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", "LATEST=checkpoints/tr11-176B-ml/latest\n",
                   "KILL_SWITCH=checkpoints/tr11-176B-ml/kill-switch-tr11-176B-exp1\n",
                   "BUDGET_S=359400 ", "MAX_REQUEUES=10\n"]:
        assert needle in script, needle
    assert "exit_duration_in_mins=" not in script  # no override: the tr11 config already sets 5990
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0  # valid shell


def test_exit_duration_follows_the_time_limit(capsys):
    main(["--config", str(CONFIG), "--nodes", "24", "--time", "1-00:00:00", "checkpoint.exit_duration_in_mins=null"])
    script = capsys.readouterr().out
    assert "checkpoint.exit_duration_in_mins=1430" in script and "BUDGET_S=85800 " in script


def test_world_that_does_not_fit_is_refused():
    with pytest.raises(BloomstackError, match="not divisible by tp 4 x pp 12"):
        main(["--config", str(CONFIG), "--nodes", "5"])


def test_a_budget_past_the_time_limit_or_no_checkpoint_dir_is_refused():
    # tr11's 5990 minutes in a 20 h job: Slurm would kill the trainer before it saves
    with pytest.raises(BloomstackError, match="past the --time 20:00:00 limit"):
        main(["--config", str(CONFIG), "--nodes", "48", "--time", "20:00:00"])
    with pytest.raises(BloomstackError, match="set checkpoint.dir=PATH or --max-requeues 0"):
        main(["--config", str(TINY), "--nodes", "1", "--gpus-per-node", "2"])
    with pytest.raises(BloomstackError, match="'a b' is not a node name"):
        main(["--config", str(CONFIG), "--nodes", "48", "--exclude", "a b"])


# --- the script's recovery decisions, run under a fake Slurm -------------------------------------------

FAKE_SRUN = """#!/bin/bash
# one attempt of the training: record the command, maybe sleep, maybe save a checkpoint, exit with a code
echo "$@" > "$FAKE/srun.args"
sleep "${FAKE_SLEEP:-0}"
if [ -n "${FAKE_SAVE:-}" ]; then echo "$FAKE_SAVE" > "$FAKE_LATEST"; fi
exit "${FAKE_RC:-0}"
"""
FAKE_SCONTROL = """#!/bin/bash
case "$1" in
    show) echo node1; echo node2 ;;
    requeue) echo "$2" >> "$FAKE/requeued" ;;
esac
"""


@pytest.fixture
def job(tmp_path):
    """Render a 2-node tiny-cpu job into tmp_path and return a function that runs it once."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", FAKE_SRUN), ("scontrol", FAKE_SCONTROL)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()

    def run(*, rc=0, save=None, sleep=0.0, requeues=0, time="100:00:00", margin=10.0, kill_switch=False):
        script = tmp_path / "job.slurm"
        main(["--config", str(TINY), "--nodes", "2", "--gpus-per-node", "1", "--workdir", str(tmp_path),
              "--time", time, "--save-margin-minutes", str(margin), "--max-requeues", "3", "--out", str(script),
              "schedule.micro_batch_size=1", f"checkpoint.dir={ckpt}",
              f"checkpoint.kill_switch_path={tmp_path / 'KILL'}"])
        if kill_switch:
            (tmp_path / "KILL").touch()
        (tmp_path / "requeued").unlink(missing_ok=True)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE": str(tmp_path),
               "FAKE_LATEST": str(ckpt / "latest"), "FAKE_RC": str(rc), "FAKE_SLEEP": str(sleep),
               "FAKE_SAVE": save or "", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[1-2]",
               "SLURM_NNODES": "2", "SLURM_RESTART_COUNT": str(requeues)}
        out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
        requeued = (tmp_path / "requeued").read_text().split() if (tmp_path / "requeued").exists() else []
        return out.returncode, out.stdout + out.stderr, requeued

    (ckpt / "latest").write_text("global_step5")
    return run


def test_finished_training_is_not_requeued(job, tmp_path):
    rc, out, requeued = job(rc=0, save="global_step9")
    assert (rc, requeued) == (0, []) and "training finished" in out and "latest checkpoint: global_step9" in out
    assert "attempt 1 of at most 4 on node[1-2]; latest checkpoint: global_step5" in out
    args = (tmp_path / "srun.args").read_text()  # what srun ran on every node
    assert "--max_restarts 3" in args and "-m bloomtrain.cli train --config" in args


def test_time_budget_stop_is_requeued_until_max_requeues(job):
    # budget: 1 min - 0.98 min = 1.2 s; the fake training runs past it and exits 0, as the trainer does
    rc, out, requeued = job(rc=0, save="global_step6", sleep=1.1, time="00:01:00", margin=0.98)
    assert (rc, requeued) == (0, ["4242"]) and "stopped at its time budget (1 s) and saved global_step6" in out
    assert "requeueing (1 of 3): the next attempt resumes from global_step6" in out
    rc, out, requeued = job(rc=0, save="global_step7", sleep=1.1, time="00:01:00", margin=0.98, requeues=3)
    assert (rc, requeued) == (1, []) and "not requeued: requeued 3 times already (max_requeues 3)" in out


def test_failure_after_a_new_checkpoint_is_requeued(job):
    rc, out, requeued = job(rc=1, save="global_step8", requeues=1)
    assert (rc, requeued) == (0, ["4242"])
    assert "training failed (exit 1) after saving global_step8; requeueing (2 of 3)" in out


def test_failure_without_progress_stops_and_names_the_nodes(job):
    rc, out, requeued = job(rc=1)
    assert (rc, requeued) == (1, [])
    assert "without a new checkpoint in this attempt (latest: global_step5" in out
    assert "if a node of node[1-2] is bad, add it to --exclude" in out


def test_config_error_and_kill_switch_stop(job):
    rc, out, requeued = job(rc=2, save="global_step8")
    assert (rc, requeued) == (2, []) and "rejected its config or input (exit 2)" in out
    rc, out, requeued = job(rc=0, kill_switch=True)
    assert (rc, requeued) == (0, []) and "stopped by the kill switch" in out


def test_overrides_reach_the_trainer_as_written(tmp_path):
    """Quotes, spaces and $(...) in an override are one argument of the trainer, never shell code; the node
    rank is this node's $SLURM_PROCID. srun here runs its command; `python` prints the argv it got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do [[ "$1" == --jobid ]] && shift; shift; done\nexec "$@"\n')
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "python").write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$FAKE/argv"\n')
    for name in ("srun", "scontrol", "python"):
        (bin_dir / name).chmod(0o755)
    nasty = f"checkpoint.kill_switch_path={tmp_path}/it's a \"stop\" $(touch {tmp_path}/PWNED) `id`"
    script = tmp_path / "job.slurm"
    main(["--config", str(TINY), "--nodes", "2", "--gpus-per-node", "1", "--workdir", str(tmp_path),
          "--python", "python", "--max-requeues", "0", "--env", "GREETING=hello world", "--out", str(script),
          "schedule.micro_batch_size=1", nasty])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE": str(tmp_path), "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NNODES": "2", "SLURM_PROCID": "1"}
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[argv.index("--node_rank") + 1] == "1" and argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("train"):] == ["train", "--config", str(TINY), "schedule.micro_batch_size=1", nasty,
                                         argv[-1]] and argv[-1].startswith("checkpoint.exit_duration_in_mins=")
    assert not (tmp_path / "PWNED").exists()
    assert "export GREETING='hello world'" in script.read_text()
