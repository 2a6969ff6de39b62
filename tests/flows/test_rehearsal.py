"""The rehearsal (flows.rehearsal) without its 10-minute run: the training config it runs is the tr11 recipe with
exactly the overrides its report lists, the mixture blend of the demo languages is tr11's ratios, and a mixture
blend without a token budget publishes its artifacts.

The override list is checked against the two configs themselves (the recipe as loaded, the run's train.yaml as
the train stage writes it after the pipeline's wiring), so an override the rehearsal makes without declaring it
fails here, and so does a declared one that no longer differs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from bloomdata.blend.report import write_blend
from bloomdata.blend.spec import load_blend_spec
from bloomdata.blend.tune import tune_blend
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDatasetWriter
from bloomtrain.config import load_config
from bloomtrain.data import per_dataset_valid_sets
from bloomtrain.metrics import read_precision
from bloomtrain.precision import CpuInfo, PrecisionChoice
from flows.config import DEMO_LANGS
from flows.pipeline import wire_training
from flows.rehearsal import RehearsalConfig, pipeline_config
from flows.rehearsal_config import (
    MIXTURE,
    RECIPE,
    RehearsalScale,
    override_rows,
    overrides_markdown,
    precision_rows,
    recipe_config,
)
from flows.train import with_run_dirs, write_run_config

# Every key the rehearsal changes, and nothing else: a change here is a deliberate change of the rehearsal.
SIZES = {
    "model.num_layers": 4, "model.hidden_size": 224, "model.num_heads": 14, "model.seq_length": 128,
    "model.vocab_size": 4000, "model.pad_vocab_size_to": None,
    "parallel.tp": 2, "parallel.pp": 2,
    "schedule.global_batch_size": 16, "schedule.rampup_batch_size": [4, 2, 800], "schedule.train_samples": 3200,
    "schedule.warmup_samples": 320, "schedule.decay_samples": 2909,
    "logging.eval_interval": 50,
}
# paths, and what the pipeline wires in (values checked in the test)
WIRED = {"checkpoint.dir", "checkpoint.kill_switch_path", "logging.dir", "data.blend", "data.valid_sets",
         "data.tokenizer"}

def _write(prefix, docs: int, tokens: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with IndexedDatasetWriter(prefix, dtype=np.uint16) as w:
        for _ in range(docs):
            w.add_document(rng.integers(4, 300, size=tokens))


@pytest.fixture()
def demo_datasets(tmp_path):
    """One dataset per demo language, named as the pipeline's build names them (40 documents of 300 tokens)."""
    out = tmp_path / "data"
    out.mkdir()
    for i, lang in enumerate(DEMO_LANGS):
        _write(out / lang, 40, 300, i)
    return {lang: str(out / lang) for lang in DEMO_LANGS}


def _ran(tmp_path, blend_yaml: str, sets: dict[str, str]):
    """The train.yaml the rehearsal's train stage writes, loaded as the trainer loads it."""
    pipeline = pipeline_config(RehearsalConfig(out_dir=str(tmp_path / "rehearsal")))
    wired = wire_training(pipeline.train, 4000, blend_yaml, tmp_path / "rehearsal" / "train",
                          tokenizer=str(tmp_path / "rehearsal" / "tokenizer"), valid_sets=sets)
    run_dir = tmp_path / "rehearsal" / "train"
    return load_config(write_run_config(with_run_dirs(wired.train, run_dir), run_dir))


def test_the_overrides_are_exactly_the_differences_from_the_recipe(tmp_path):
    sets = {"en": "/d/en", "yo": "/d/yo"}
    ran = _ran(tmp_path, "/b/blend.yaml", sets)
    rows = override_rows(recipe_config(), ran, RehearsalScale())
    assert {r.key for r in rows} == set(SIZES) | WIRED
    got = {r.key: r.rehearsal for r in rows}
    assert {k: got[k] for k in SIZES} == SIZES
    run = tmp_path / "rehearsal" / "train"
    assert got["checkpoint.dir"] == str(run / "checkpoints") and got["logging.dir"] == str(run / "logs")
    assert got["data.blend"] == "/b/blend.yaml" and got["data.valid_sets"] == {k: {"path": v, "split": None,
                                                                                     "samples": None}
                                                                                for k, v in sets.items()}
    recipe = yaml.safe_load(RECIPE.read_text())  # the recipe's text, not its loaded form: values it names itself
    assert {r.key: r.tr11 for r in rows if r.key.startswith("schedule.")} == {
        f"schedule.{k}": (list(v) if isinstance(v, list) else v) for k, v in recipe["schedule"].items()
        if f"schedule.{k}" in SIZES}
    # The recipe's path, unchanged: precision, kernels, index rules, dropout, the optimizer, activation checkpoints.
    assert (ran.optim, ran.data.compat, ran.model.kernels) == (recipe_config().optim, "bloom", "auto")
    assert ran.optim.precision == "bf16" and ran.model.hidden_dropout == ran.model.attention_dropout == 0.1
    assert ran.parallel.activation_checkpointing and ran.schedule.micro_batch_size == 2
    ds = ran.to_deepspeed_config(4)
    assert ds["zero_optimization"]["stage"] == 1 and ds["bf16"] == {"enabled": True, "immediate_grad_update": True}
    md = overrides_markdown(rows, 4000, tmp_path / "rehearsal")
    assert md.count("\n| `") == len(rows) == len(SIZES) + len(WIRED) and "`vocab_size` 250,680 -> 4,000" in md
    assert "| `schedule.rampup_batch_size` | `[192, 16, 9765625]` | `[4, 2, 800]` |" in md


def test_a_cpu_without_native_bf16_adds_the_trainers_precision_override():
    why = "this CPU (AMD EPYC 7B12; torch CPU kernels: AVX2) has no native bf16 (...)"
    fallback = PrecisionChoice(configured="bf16", ran="fp32", device="cpu (AMD EPYC 7B12)", why=why)
    rows = precision_rows(fallback)
    assert [(r.key, r.tr11, r.rehearsal) for r in rows] == [("optim.precision", "bf16", "fp32")]
    assert f"| `optim.precision` | `bf16` | `fp32` | hardware (the trainer's check): {why} |" in overrides_markdown(
        rows, 4000)
    assert precision_rows(derive(fallback, ran="bf16")) == precision_rows(None) == []


def test_an_undeclared_override_is_an_error(tmp_path):
    ran = _ran(tmp_path, "/b/blend.yaml", {})
    changed = derive(ran, optim=derive(ran.optim, lr=3e-4))
    with pytest.raises(BloomstackError, match=r"optim.lr \(6e-05 -> 0.0003\), which is not a declared override"):
        override_rows(recipe_config(), changed, RehearsalScale())


def _expected_weights() -> dict[str, float]:
    """tr11's ratios for the demo languages, from the mixture file's text: zh is zh-Hans; sw and yo are the
    Niger-Congo group's ratio split by their model-card shares; renormalized over the ten."""
    groups = yaml.safe_load(MIXTURE.read_text())["groups"]
    nic = groups["nic"]
    ratios = {lang: groups["zh-Hans" if lang == "zh" else lang]["ratio"] for lang in DEMO_LANGS
              if lang not in ("sw", "yo")}
    ratios |= {lang: nic["ratio"] * nic["languages"][lang] / math.fsum(nic["languages"].values())
               for lang in ("sw", "yo")}
    total = math.fsum(ratios.values())
    return {lang: r / total for lang, r in ratios.items()}


def test_the_mixture_blend_of_the_demo_languages(tmp_path, demo_datasets):
    stage = pipeline_config(RehearsalConfig(out_dir=str(tmp_path / "rehearsal"))).blend
    run = derive(stage, datasets=demo_datasets, out_dir=str(tmp_path / "blend"), seq_length=128)
    spec = tune_blend(run)
    expected = _expected_weights()
    assert {d.name: d.weight for d in spec.datasets} == pytest.approx(expected, rel=1e-12)
    assert (spec.train_range, spec.valid_range, spec.seed, spec.split) == ("0:0.950", "0.950:1.0", 42, None)
    assert {"en-oscar", "zh-oscar", "code", "nic/wo"} <= set(spec.missing) and "nic" not in spec.missing
    # tr11's per-language validation sets: every language's held-out 5% (2 of 40 documents) holds a sample
    write_blend(spec, run.out_dir, run.max_epochs)
    sets, left_out = per_dataset_valid_sets(str(tmp_path / "blend" / "blend.yaml"), 128, "bloom")
    assert sorted(sets) == sorted(DEMO_LANGS) and left_out == []
    assert load_blend_spec(str(tmp_path / "blend" / "blend.yaml")).mixture == str(MIXTURE)


@pytest.mark.integration
def test_a_mixture_blend_without_a_budget_publishes_its_artifacts(prefect_harness, tmp_path, demo_datasets):
    from flows.blend import blend_flow
    from tests.flows.prefect_api import artifact

    stage = pipeline_config(RehearsalConfig(out_dir=str(tmp_path / "rehearsal"))).blend
    assert stage.token_budget is None  # as the recipe's `bloomdata blend --mixture` command
    result = blend_flow(demo_datasets, derive(stage, out_dir=str(tmp_path / "blend")))
    table = {r["language"]: r for r in json.loads(artifact("blend-weights").data)}
    assert set(table) == set(DEMO_LANGS)
    assert table["yo"]["tokens drawn"] is None and table["yo"]["epochs"] is None
    assert table["en"]["weight"] == round(_expected_weights()["en"], 5)
    assert "no token budget" in artifact("blend-chart").data
    assert result.result.spec.mixture == str(MIXTURE)


def test_the_command_line_sets_the_sizes():
    from flows.rehearsal import parser

    cfg, _ = parser().parse(["--out", "runs/r", "--scale.train-samples", "96", "--scale.rampup-batch-size", "4", "2",
                             "24", "--workers", "1"])
    assert cfg == RehearsalConfig(out_dir="runs/r", workers=1,
                                  scale=RehearsalScale(train_samples=96, rampup_batch_size=(4, 2, 24)))
    with pytest.raises(BloomstackError, match="scale: .*num_heads 12 must divide hidden_size 224"):
        parser().parse(["--scale.num-heads", "12"])


# The whole flow, run twice (the second skips every stage), in 112-126 s beside the other pytest worker (one OpenMP
# thread each; 138-146 s with two): the same code path and model, fewer steps (10 iterations, the ramp-up in 4).
SMOKE = RehearsalScale(train_samples=96, rampup_batch_size=(4, 2, 24), warmup_samples=8, decay_samples=87,
                       save_interval=5, eval_interval=5)


@pytest.mark.integration
def test_the_rehearsal_runs_the_recipe_end_to_end(prefect_harness, tmp_path):
    from bloomtrain.metrics import read_metrics
    from flows.rehearsal import rehearsal_flow
    from tests.flows.prefect_api import artifact

    config = RehearsalConfig(out_dir=str(tmp_path / "rehearsal"), scale=SMOKE)
    result = rehearsal_flow(config)
    # bf16 where the CPU has native bf16, fp32 (and one more override, the trainer's) where it has not
    precision = read_precision(result.pipeline.train.result.paths.metrics)
    assert precision is not None and precision.ran == ("bf16" if CpuInfo.detect().native_bf16 else "fp32")
    assert precision.line() in result.summary_markdown
    assert {r.key for r in result.overrides} == set(SIZES) | WIRED | {"checkpoint.save_interval"} | (
        {"optim.precision"} if precision.changed else set())
    assert artifact("rehearsal-overrides").data == result.overrides_markdown
    assert artifact("rehearsal-summary").data == result.summary_markdown
    assert [s for s, _ in result.stage_seconds] == ["clean", "tokenizer", "dataset", "blend", "train", "export",
                                                       "evaluate"]
    # the ramp-up ran: the global batch grew from 4 to 16 in steps
    run = result.pipeline.train.result
    train, _ = read_metrics(run.paths.metrics)
    batches = list(dict.fromkeys(row["global_batch"] for row in train))
    assert batches[0] == 4 and batches[-1] == 16 and len(batches) >= 4 and batches == sorted(batches)
    # TP 2 x PP 2 checkpoints with the fused-kernel self-check in the precision that ran, exported and loaded
    ckpt = Path(run.paths.checkpoints)
    meta = json.loads((ckpt / (ckpt / "latest").read_text().strip() / "bloomtrain_model.json").read_text())
    assert (meta["tp_size"], meta["pp_size"]) == (2, 2)
    assert {c["dtype"] for c in meta["kernel_selfcheck"]} == {"bfloat16" if precision.ran == "bf16" else "float32"}
    assert len(result.pipeline.export.result.samples) == 3
    # every language evaluated on its held-out documents, in training (valid/<lang>) and after the export
    assert set(result.pipeline.evaluate.result.models["exported"].languages) == set(DEMO_LANGS)
    assert set(load_config(run.paths.config).data.valid_sets) == set(DEMO_LANGS)

    again = rehearsal_flow(config)  # every stage done: skipped
    assert [s for _, s in again.stage_seconds] == [None] * 7
    assert again.overrides == result.overrides
