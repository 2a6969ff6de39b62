"""``bloomtrain slurm``: a tr11-style sbatch script, validated against the config before queueing, that
requeues itself. The recovery decisions are checked by running the script itself under a fake Slurm
(``srun`` plays one attempt of the training: it may save a checkpoint, sleep, exit with a code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bloomdata.errors import BloomstackError
from bloomtrain.cli.slurm import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "train" / "bloom-176b-tr11.yaml"
TINY = ROOT / "configs" / "train" / "tiny-cpu.yaml"


@pytest.mark.integration
def test_tr11_script(tr11_dir, tmp_path, capsys):
    out = tmp_path / "tr11.slurm"
    assert main(["--config", str(CONFIG), "--nodes", "48", "--time", "100:00:00", "--out", str(out),
                 "--workdir", str(tr11_dir),
                 "--sbatch=--partition=gpu_p5", "--exclude", "jean-zay-iam34", "--exclude", "jean-zay-iam[35-36]",
                 "optim.lr=5e-5"]) == 0
    script = out.read_text()
    for needle in ["#SBATCH --nodes=48", "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:8",
                   "#SBATCH --partition=gpu_p5", "(TP 4 x PP 12 x DP 8)", "--rdzv-backend c10d",
                   "--nproc-per-node 8", "-m bloomtrain.launcher", "-m bloomtrain.cli train --config",
                   "optim.lr=5e-5", "#SBATCH --requeue ", "#SBATCH --open-mode=append", "srun --label ",
                   "#SBATCH --exclude=jean-zay-iam34,jean-zay-iam[35-36]\n", "--max-restarts 3\n",
                   "export MASTER_PORT=$((10000 + SLURM_JOB_ID % 20000))\n",
                   "export BLOOMTRAIN_EXIT_DIR=checkpoints/tr11-176B-ml/exits/job$SLURM_JOB_ID-$REQUEUES",
                   "LATEST=checkpoints/tr11-176B-ml/latest\n", "MAX_REQUEUES=10\n"]:
        assert needle in script, needle
    assert "exit_duration_in_mins=" not in script  # no override: the tr11 config already sets 5990
    assert "node_rank" not in script  # a c10d rendezvous assigns node ranks
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0  # valid shell


def test_exit_duration_follows_the_time_limit(tr11_dir, capsys):
    main(["--config", str(CONFIG), "--nodes", "24", "--time", "1-00:00:00", "--workdir", str(tr11_dir),
          "checkpoint.exit_duration_in_mins=null"])
    script = capsys.readouterr().out
    assert "checkpoint.exit_duration_in_mins=1430" in script


def test_a_cpu_recipe_asks_for_no_gpu(capsys):
    main(["--config", str(TINY), "--nodes", "2", "--gpus-per-node", "2", "--max-requeues", "0"])
    script = capsys.readouterr().out
    assert "--gres" not in script and "world = 2 x 2 = 4 CPU processes" in script
    main(["--config", str(TINY), "--nodes", "2", "--gpus-per-node", "2", "--device", "gpu", "--max-requeues", "0",
          "--master-port", "7001"])
    script = capsys.readouterr().out
    assert "#SBATCH --gres=gpu:2\n" in script and "export MASTER_PORT=7001\n" in script


@pytest.mark.integration
def test_a_missing_input_is_refused_when_the_job_is_written(tmp_path):
    """Every input path is checked against the job's workdir, naming the key and the file (exit 2 in the CLI)."""
    blend = tmp_path / "blend.yaml"
    blend.write_text("seq_length: 32\nsplit: '90,10,0'\ndatasets:\n- {name: en, prefix: data/en, weight: 1.0}\n")
    base = ["--config", str(TINY), "--nodes", "1", "--max-requeues", "0", "--workdir", str(tmp_path)]
    with pytest.raises(BloomstackError, match=r"^data.blend: blend file .*/nope.yaml not found; write it with"):
        main([*base, "data.kind=blend", "data.blend=nope.yaml"])
    with pytest.raises(BloomstackError, match=rf"^data.blend \({blend}, dataset en\): dataset {tmp_path}/data/en.bin"
                                              r"/.idx not found; build it with `bloomdata build`"):
        main([*base, "data.kind=blend", "data.blend=blend.yaml"])
    with pytest.raises(BloomstackError, match="^data.tokenizer: .*/tok is neither a tokenizer.json"):
        main([*base, "data.tokenizer=tok"])
    cli = subprocess.run([sys.executable, "-m", "bloomtrain.cli", "slurm", *base, "data.kind=blend",
                          "data.blend=nope.yaml"], capture_output=True, text=True, cwd=ROOT)
    assert cli.returncode == 2 and cli.stdout == "" and len(cli.stderr.splitlines()) == 1, cli.stderr


def test_world_that_does_not_fit_is_refused(tr11_dir):
    with pytest.raises(BloomstackError, match="not divisible by tp 4 x pp 12"):
        main(["--config", str(CONFIG), "--nodes", "5", "--workdir", str(tr11_dir)])


def test_a_budget_past_the_time_limit_or_no_checkpoint_dir_is_refused(tr11_dir):
    # tr11's 5990 minutes in a 20 h job: Slurm would kill the trainer before it saves
    with pytest.raises(BloomstackError, match="past the time 20:00:00 limit"):
        main(["--config", str(CONFIG), "--nodes", "48", "--time", "20:00:00", "--workdir", str(tr11_dir)])
    with pytest.raises(BloomstackError, match="set checkpoint.dir=PATH or max_requeues to 0"):
        main(["--config", str(TINY), "--nodes", "1", "--gpus-per-node", "2"])
    with pytest.raises(BloomstackError, match="'a b' is not a node name"):
        main(["--config", str(CONFIG), "--nodes", "48", "--exclude", "a b", "--workdir", str(tr11_dir)])


# --- the script's recovery decisions, run under a fake Slurm -------------------------------------------

FAKE_SRUN = """#!/bin/bash
# one attempt of the training: record the command, maybe save a checkpoint, leave rank 0's exit record, exit
echo "$@" > "$FAKE/srun.args"
if [ -n "${FAKE_SAVE:-}" ]; then echo "$FAKE_SAVE" > "$FAKE_LATEST"; fi
mkdir -p "$BLOOMTRAIN_EXIT_DIR/attempt-0"
printf '{"kind": "%s", "rank": 0, "node": "node1", "pid": 1, "attempt": 0, "started": 0, "iteration": 7, \
"message": "%s"}' \\
    "$FAKE_KIND" "${FAKE_MESSAGE:-}" > "$BLOOMTRAIN_EXIT_DIR/attempt-0/rank-0.json"
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
    script = tmp_path / "job.slurm"
    main(["--config", str(TINY), "--nodes", "2", "--gpus-per-node", "1", "--workdir", str(tmp_path),
          "--max-requeues", "3", "--out", str(script), "--python", sys.executable,
          "schedule.micro_batch_size=1", f"checkpoint.dir={ckpt}"])

    def run(*, kind="finished", rc=0, save=None, requeues=0, message=""):
        (tmp_path / "requeued").unlink(missing_ok=True)
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE": str(tmp_path),
               "FAKE_LATEST": str(ckpt / "latest"), "FAKE_RC": str(rc), "FAKE_KIND": kind, "FAKE_MESSAGE": message,
               "FAKE_SAVE": save or "", "SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[1-2]",
               "SLURM_NNODES": "2", "SLURM_RESTART_COUNT": str(requeues), "PYTHONPATH": str(ROOT)}
        out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
        requeued = (tmp_path / "requeued").read_text().split() if (tmp_path / "requeued").exists() else []
        return out.returncode, out.stdout + out.stderr, requeued

    (ckpt / "latest").write_text("global_step5")
    return run


@pytest.mark.integration
def test_finished_training_is_not_requeued(job, tmp_path):
    rc, out, requeued = job(kind="finished", save="global_step9")
    assert (rc, requeued) == (0, []), out
    assert "attempt 1 of at most 4 on node[1-2]; latest checkpoint: global_step5" in out
    assert "job 4242: training finished at iteration 7; latest checkpoint: global_step9" in out
    args = (tmp_path / "srun.args").read_text()  # what srun ran on every node
    assert args.startswith("--label ") and "--max-restarts 3" in args and "-m bloomtrain.cli train --config" in args
    assert "--node_rank" not in args and "-m bloomtrain.launcher" in args


@pytest.mark.integration
def test_time_budget_stop_is_requeued_until_max_requeues(job):
    rc, out, requeued = job(kind="time_budget", save="global_step6")
    assert (rc, requeued) == (0, ["4242"]), out
    assert "stopped at its time budget at iteration 7 and saved global_step6; requeuing (1 of 3): the next " \
           "attempt resumes from global_step6" in out
    rc, out, requeued = job(kind="time_budget", save="global_step7", requeues=3)
    assert (rc, requeued) == (1, []) and "not requeued: requeued 3 times already (max 3)" in out


@pytest.mark.integration
def test_failure_after_a_new_checkpoint_is_requeued(job):
    rc, out, requeued = job(kind="failure", rc=1, save="global_step8", requeues=1, message="RuntimeError: boom")
    assert (rc, requeued) == (0, ["4242"]), out
    assert "training failed (rank 0 on node1 failed: RuntimeError: boom) after saving global_step8; requeuing " \
           "(2 of 3)" in out


@pytest.mark.integration
def test_failure_without_progress_stops(job):
    rc, out, requeued = job(kind="running", rc=1)
    assert (rc, requeued) == (1, []), out
    assert "training failed (rank 0 on node1 died without an exit record) without a new checkpoint in this attempt " \
           "(latest: global_step5); not requeued" in out


@pytest.mark.integration
def test_config_error_and_kill_switch_stop(job):
    # a config error stops even after a new checkpoint, with exit 2, whatever the launcher's exit code
    rc, out, requeued = job(kind="config_error", rc=1, save="global_step8", message="data.blend: x not found")
    assert (rc, requeued) == (2, []), out
    assert "rank 0 on node1: config or input error, not requeued: data.blend: x not found" in out
    rc, out, requeued = job(kind="kill_switch", save="global_step9")
    assert (rc, requeued) == (0, []) and "stopped by the kill switch at iteration 7" in out


@pytest.mark.integration
def test_a_full_disk_or_a_damaged_checkpoint_ends_the_job_and_says_why(job):
    """Never requeued, even after a new checkpoint: the next allocation would meet the same full disk (or the same
    damaged files, with checkpoint.on_corrupt=fail). The job exits 2 with the trainer's line."""
    line = ("/ckpt: disk full on the xfs filesystem mounted at /scratch (/dev/sdb1): saving global_step9 needs "
            "6,291,456 bytes (6.3 MB), 12,288 bytes (12.3 kB) free; free space there or set checkpoint.dir to another "
            "disk, then run the same command again: it resumes from global_step8")
    rc, out, requeued = job(kind="disk_full", rc=2, save="global_step8", message=line)
    assert (rc, requeued) == (2, []), out
    assert f"job 4242: rank 0 on node1: disk full, not requeued: {line}" in out
    rc, out, requeued = job(kind="corrupt_checkpoint", rc=2, message="/ckpt/global_step8/rng/rank_00001.pt: missing")
    assert (rc, requeued) == (2, []), out
    assert "rank 0 on node1: damaged checkpoint, not requeued: /ckpt/global_step8/rng/rank_00001.pt: missing" in out


@pytest.mark.integration
def test_overrides_reach_the_trainer_as_written(tmp_path):
    """Quotes, spaces and $(...) in an override are one argument of the trainer, never shell code; the
    rendezvous endpoint is this task's launch node address. srun here runs its command; `python` prints the
    argv it got."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/bin/bash\n'
                                  'while [[ "$1" == --* ]]; do [[ "$1" == --jobid ]] && shift; shift; done\n'
                                  'exec "$@"\n')
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "python").write_text('#!/bin/bash\n[[ "$*" == *bloomtrain.recovery* ]] && exit 0\n'
                                    'printf "%s\\n" "$@" > "$FAKE/argv"\n')
    for name in ("srun", "scontrol", "python"):
        (bin_dir / name).chmod(0o755)
    nasty = f"checkpoint.kill_switch_path={tmp_path}/it's a \"stop\" $(touch {tmp_path}/PWNED) `id`"
    script = tmp_path / "job.slurm"
    main(["--config", str(TINY), "--nodes", "2", "--gpus-per-node", "1", "--workdir", str(tmp_path),
          "--python", "python", "--max-requeues", "0", "--env", "GREETING=hello world", "--out", str(script),
          "schedule.micro_batch_size=1", nasty])
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE": str(tmp_path), "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "node[1-2]", "SLURM_NNODES": "2", "SLURM_LAUNCH_NODE_IPADDR": "10.0.0.1"}
    out = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[argv.index("--rdzv-endpoint") + 1] == "10.0.0.1:10007" and argv[argv.index("--nnodes") + 1] == "2"
    assert argv[argv.index("train"):] == ["train", "--config", str(TINY), "schedule.micro_batch_size=1", nasty,
                                         argv[-1]] and argv[-1].startswith("checkpoint.exit_duration_in_mins=")
    assert not (tmp_path / "PWNED").exists()
    assert "export GREETING='hello world'" in script.read_text()
