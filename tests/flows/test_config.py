"""Prefect-free pieces: the pipeline's parameter schema, its stage configs (the library models) and partial
configs, launch commands, and the training report numbers (from a hand-written metrics.jsonl)."""

from __future__ import annotations

import json
import math
import sys

import pytest

from bloomdata.blend.tune import BlendConfig
from bloomdata.config_loader import load_config
from bloomdata.errors import BloomstackError
from bloomtrain.config import ExportConfig
from bloomtrain.metrics import read_metrics, summarize
from flows.config import BlendStageConfig, ExportStageConfig, PipelineConfig, TrainStageConfig
from flows.launch_config import LaunchConfig, build_command, launch_env
from flows.report import training_markdown


def test_partial_parameters_complete_from_the_demo_defaults():
    cfg = PipelineConfig.model_validate({
        "tokenizer": {"vocab_size": 8000}, "dataset": {"scheduler": "tcp://10.0.0.1:8786"},
        "train": {"train": {"schedule": {"train_iters": 50}, "parallel": {"tp": 1}}}})
    demo = PipelineConfig()
    assert cfg.tokenizer.vocab_size == 8000 and cfg.tokenizer.alpha == demo.tokenizer.alpha
    assert cfg.dataset.scheduler == "tcp://10.0.0.1:8786" and cfg.dataset.append_eod
    assert cfg.train.train.schedule.train_iters == 50 and cfg.train.train.parallel.tp == 1
    assert cfg.train.train.model == demo.train.train.model  # untouched sections keep the demo's values
    preset = TrainStageConfig.model_validate({"train": {"model": {"preset": "bloom-560m", "seq_length": 256}}})
    assert preset.train.model.hidden_size == 1024 and preset.train.model.seq_length == 256  # not the demo's 128


def test_stage_configs_are_the_library_models_with_demo_defaults():
    assert issubclass(BlendStageConfig, BlendConfig) and issubclass(ExportStageConfig, ExportConfig)
    cfg = PipelineConfig.model_validate({"blend": {"alpha": 0.5, "floor": {"en": 0.1}, "overrides": {"fr": 0.2}},
                                         "export": {"tag": "global_step9", "dtype": "bfloat16"}})
    assert (cfg.blend.alpha, cfg.blend.floor, cfg.blend.overrides) == (0.5, {"en": 0.1}, {"fr": 0.2})
    assert (cfg.blend.split, cfg.blend.out_dir, cfg.blend.max_epochs) == ("90,10,0", "runs/blend", 4.0)
    assert (cfg.export.tag, cfg.export.dtype, cfg.export.out_dir) == ("global_step9", "bfloat16", "runs/hf")
    assert cfg.export.prompts == PipelineConfig().export.prompts


def test_partial_parameters_fail_in_the_loaders_one_line_format():
    """The same loader and message format as a command line, for a deployment's partial parameters."""
    with pytest.raises(BloomstackError) as info:
        load_config(PipelineConfig, values={"train": {"train": {"optim": {"lr": "fast"}}}}, origin="parameters")
    assert str(info.value).startswith("parameters: train.train.optim.lr: Input should be a valid number")
    assert "(got 'fast'); fix: change train.train.optim.lr: Peak learning rate" in str(info.value)


def test_parameter_schema_is_json_and_demo_is_distributed():
    from prefect.utilities.callables import parameter_schema

    from flows.pipeline import bloom_pipeline

    schema = parameter_schema(bloom_pipeline.fn).model_dump()
    assert "config" in schema["properties"] and json.dumps(schema)
    demo = PipelineConfig()
    assert demo.train.launch.nproc_per_node >= 2  # the demo trains across processes ...
    assert demo.train.train.parallel.tp * demo.train.train.parallel.pp > 1  # ... with a parallel layout > 1
    assert demo.train.train.dp_size(demo.train.launch.nproc_per_node) >= 1
    assert len(demo.corpus) >= 5


def test_launch_commands():
    torchrun = build_command(LaunchConfig(nproc_per_node=4, launcher_args=["--nnodes=2"]), "t.yaml", ["a.b=1"])
    assert torchrun == [sys.executable, "-m", "bloomtrain.launcher", "--standalone", "--nproc-per-node=4",
                        "--max-restarts=3", "--nnodes=2", "-m", "bloomtrain.cli", "train", "--config", "t.yaml",
                        "a.b=1"]
    assert launch_env(LaunchConfig(env={"A": "1"})) == {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1", "A": "1"}
    assert launch_env(LaunchConfig(launcher="deepspeed", env={"A": "1"})) == {"A": "1"}
    ds = build_command(LaunchConfig(launcher="deepspeed", nproc_per_node=8), "t.yaml")
    assert ds[1:5] == ["-m", "deepspeed.launcher.runner", "--num_gpus=8", "--no_local_rank"]
    assert ds[-5:] == ["--module", "bloomtrain.cli", "train", "--config", "t.yaml"]
    assert build_command(LaunchConfig(launcher="sbatch", sbatch_script="job.sh"), "t.yaml") == \
        ["sbatch", "--wait", "job.sh"]
    with pytest.raises(ValueError, match="sbatch_script"):
        build_command(LaunchConfig(launcher="sbatch"), "t.yaml")


def test_report_numbers(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [{"iteration": i, "loss": 5.0 - 0.5 * i, "tokens_per_s": 100.0 * i, "tflops": 0.5, "mfu": 0.25}
            for i in range(1, 5)]
    rows.insert(2, {"iteration": 2, "valid_loss": 3.0, "valid_ppl": math.exp(3.0)})
    # A resumed run rewrites iteration 4; the last record wins. A killed writer leaves a torn last line.
    text = "\n".join(json.dumps(r) for r in rows) + "\n" + json.dumps({"iteration": 4, "loss": 2.0}) + "\n{\"iter"
    path.write_text(text)
    train, evals = read_metrics(path)
    assert [r["iteration"] for r in train] == [1, 2, 3, 4] and train[-1]["loss"] == 2.0
    s = summarize(train, evals)
    assert s.final_loss == 2.0 and s.perplexity == pytest.approx(math.exp(2.0))
    assert s.tokens_per_s == 300.0  # median of iterations 2..4 (2 and 3 have throughput, 4 does not)
    assert s.valid_loss == 3.0 and s.mfu == 0.25
    md = training_markdown(s, paths={"checkpoints": "/c"})
    assert "| MFU | 25.0% |" in md and "| checkpoints | `/c` |" in md
    assert read_metrics(tmp_path / "missing.jsonl") == ([], [])


def test_demo_rejects_a_missing_corpus_in_one_line(capsys):
    from flows.demo import main

    assert main(["--corpus", "/no/such/corpus.jsonl", "--out", "unused"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/no/such/corpus.jsonl" in err and "no such file" in err
