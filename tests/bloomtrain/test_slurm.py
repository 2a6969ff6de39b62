"""``bloomtrain slurm``: a tr11-style sbatch script, validated against the config before queueing."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bloomdata.errors import BloomstackError
from bloomtrain.cli.slurm import main

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "train" / "bloom-176b-tr11.yaml"


def test_tr11_script(tmp_path, capsys):
    out = tmp_path / "tr11.slurm"
    assert main(["--config", str(CONFIG), "--nodes", "48", "--time", "100:00:00", "--out", str(out),
                 "--sbatch=--partition=gpu_p5", "optim.lr=5e-5"]) == 0
    script = out.read_text()
    for needle in ["#SBATCH --nodes=48", "#SBATCH --ntasks-per-node=1", "#SBATCH --gres=gpu:8",
                   "#SBATCH --partition=gpu_p5", "(TP 4 x PP 12 x DP 8)", "--rdzv_backend c10d",
                   "--nproc_per_node 8", "--node_rank \\$SLURM_PROCID", "-m bloomtrain.cli train --config",
                   "optim.lr=5e-5"]:
        assert needle in script, needle
    assert "exit_duration_in_mins" not in script  # the tr11 config already sets 5990
    assert subprocess.run(["bash", "-n", str(out)]).returncode == 0  # valid shell


def test_exit_duration_follows_the_time_limit(capsys):
    main(["--config", str(CONFIG), "--nodes", "24", "--time", "1-00:00:00", "checkpoint.exit_duration_in_mins=null"])
    assert "checkpoint.exit_duration_in_mins=1430" in capsys.readouterr().out


def test_world_that_does_not_fit_is_refused():
    with pytest.raises(BloomstackError, match="not divisible by tp 4 x pp 12"):
        main(["--config", str(CONFIG), "--nodes", "5"])
