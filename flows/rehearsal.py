"""``python -m flows.rehearsal [--out DIR]``: BLOOM-176B's training path (tr11), scaled down to a 2-core CPU box.

The rehearsal is ``bloom_pipeline`` run on a config built from BigScience's own: the embedded 10-language
corpus, cleaned by the pipeline's clean stage (its defaults), a tokenizer with BLOOM's settings (a small
vocabulary), per-language datasets, a blend weighted by the tr11 mixture
(``configs/data/bloom-tr11-mixture.yaml``, the recipe's ``bloomdata blend --mixture`` with its 95% / 5% train
/ valid ranges and seed 42), the 176B recipe (``configs/train/bloom-176b-tr11.yaml``) with only its sizes
shrunk (``flows.rehearsal_config``), trained by torchrun over 4 processes, TP 2 x PP 2 on gloo, in bf16 with
fused kernels ``auto``, BLOOM's index rules and the batch ramp-up; then the export and the evaluation of every
language on its held-out documents. Every stage is the pipeline's own flow, so what the rehearsal proves is
what a real run executes; a later stage added to the pipeline joins it.

Languages: every corpus language is a tr11 group by name (``zh`` is zh-Hans by its alias) except ``sw`` and
``yo``, which tr11 merged into the Niger-Congo group ``nic``. The rehearsal keeps them as two datasets, each
weighted by its model-card share of ``nic`` (the mixture's ``languages``), so the group's ratio is split,
not dropped, and each has its own validation set and evaluation row.

The flow publishes ``rehearsal-overrides`` (every key of the training config that ran which differs from the
recipe, the recipe's value, the rehearsal's and why: computed from ``train/train.yaml``, and an undeclared
difference fails the run) and ``rehearsal-summary`` (time per stage, what of the recipe's path ran: ramp-up,
kernels, precision, layout, and bits per byte per language).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from prefect import flow, get_run_logger
from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel, ConfigDict, Field

from bloomdata import durable
from bloomdata.blend.spec import BlendSpec
from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.config_loader import DASHBOARD, cli_option, derive
from bloomdata.errors import BloomstackError
from bloomdata.tokenizer.bpe import TokenizerTrainConfig
from bloomtrain.checkpoint.tags import read_latest
from bloomtrain.config import TrainConfig, load_config
from bloomtrain.metrics import read_metrics, read_precision
from flows.config import BlendStageConfig, PipelineConfig, TrainStageConfig, demo_build_config, demo_sources
from flows.console import setup
from flows.evaluate import bpb_table
from flows.failures import ended_unfinished, stage_result, user_errors
from flows.interrupts import run_entry_point
from flows.launch_config import LaunchConfig
from flows.pipeline import bloom_pipeline
from flows.rehearsal_config import (
    MIXTURE,
    PP,
    RECIPE,
    TP,
    OverrideRow,
    RehearsalScale,
    override_rows,
    overrides_markdown,
    precision_rows,
    recipe_config,
    rehearsal_train_config,
)
from flows.results import PipelineResult, TrainedRun
from flows.stages import MARKER, read_marker
from flows.ui import database


class RehearsalConfig(BaseModel):
    """What a rehearsal run may choose: where it writes, the sizes it shrinks, the build's workers."""

    model_config = ConfigDict(extra="forbid")

    out_dir: str = Field("runs/rehearsal", description="output directory (one per stage under it)",
                         json_schema_extra=cli_option("--out", metavar="DIR"))
    scale: RehearsalScale = Field(default_factory=RehearsalScale, description="the sizes shrunk from tr11's")
    workers: int = Field(2, ge=1, description="Dask worker processes of the dataset build")
    dashboard: bool = Field(False, description="the dataset build: " + DASHBOARD)


def pipeline_config(config: RehearsalConfig) -> PipelineConfig:
    """The pipeline run by the rehearsal: the demo corpus through the tr11 tokenizer, mixture and recipe."""
    root = Path(config.out_dir).resolve()
    train = rehearsal_train_config(config.scale, root / "train")
    # BLOOM's tokenizer settings are TokenizerTrainConfig's defaults; only the vocabulary is the rehearsal's.
    tokenizer = TokenizerTrainConfig(sources=demo_sources(), out_dir=str(root / "tokenizer"),
                                     vocab_size=config.scale.vocab_size, show_progress=False)
    # The recipe's `bloomdata blend --mixture ... --seed 42`: no split, so the mixture's ranges apply.
    blend = BlendStageConfig(mixture=str(MIXTURE), split=None, compat=train.data.compat, seed=train.seed)
    # 4 ranks share 2 cores: one thread each, or they oversubscribe the cores
    launch = LaunchConfig(nproc_per_node=TP * PP, env={"OMP_NUM_THREADS": "1"})
    return PipelineConfig(name="bloom-176b-rehearsal", out_dir=str(root), corpus=demo_sources(), tokenizer=tokenizer,
                          dataset=derive(demo_build_config(), workers=config.workers, dashboard=config.dashboard),
                          blend=blend, train=TrainStageConfig(train=train, launch=launch))


def stage_seconds(root: Path, started: float) -> list[tuple[str, float | None]]:
    """(stage, seconds) in the order the stages finished, from each stage marker's write time; None for a stage
    finished before ``started`` (skipped by this run)."""

    done = sorted(((p.stat().st_mtime, read_marker(p.parent)) for p in root.glob(f"*/{MARKER}")),
                  key=lambda x: x[0])
    out, previous = [], started
    for mtime, marker in done:
        if marker is None:
            continue
        out.append((marker.stage, None if mtime < started else mtime - max(previous, started)))
        previous = max(previous, mtime)
    return out


def ramp_text(metrics: str) -> str:
    """The global batch sizes the run stepped through, each with the iteration it started at."""

    steps, last = [], None
    for row in read_metrics(metrics)[0]:
        if row.get("global_batch") != last:
            last = row.get("global_batch")
            steps.append(f"{last} (iter {row['iteration']})")
    return " -> ".join(steps)


def kernels_text(checkpoints: str) -> str:
    """The fused-kernel self-check recorded in the last checkpoint's metadata."""

    tag = read_latest(checkpoints)
    meta = durable.read_json(Path(checkpoints) / tag / "bloomtrain_model.json") if tag else None
    checks = (meta or {}).get("kernel_selfcheck") or []
    if not checks:
        return "no self-check recorded"
    return "; ".join(f"{c.get('kernel')} {'fused' if c.get('fused') else 'PyTorch'} ({c.get('device')} "
                     f"{c.get('dtype')})" for c in checks)


class RehearsalResult(BaseModel):
    """What the rehearsal returns: the pipeline's result, the overrides of the recipe and the time per stage."""

    pipeline: PipelineResult
    overrides: list[OverrideRow]
    stage_seconds: list[tuple[str, float | None]]  # (stage, seconds; None: done before this run)
    seconds: float
    overrides_markdown: str
    summary_markdown: str


def summary_markdown(result: PipelineResult, seconds: float, stages: list[tuple[str, float | None]]) -> str:
    """Time per stage, the recipe's path as it ran (from the config the trainer read), bits per byte."""
    run = result.train.result
    ran = load_config(run.paths.config)
    spec = result.blend.result.spec
    lines = [f"# Rehearsal of BLOOM-176B (tr11) in {seconds / 60:.1f} min", "",
             "| stage | seconds |", "|---|---:|"]
    lines += [f"| {name} | {'skipped (done before)' if s is None else f'{s:.0f}'} |" for name, s in stages]
    lines += ["", "## The recipe's path, as it ran", ""]
    if result.clean is not None:  # the pipeline's clean stage, as ROOTS was cleaned
        c = result.clean.result
        lines.append(f"- clean: {c.documents_kept:,} of {c.documents_in:,} documents kept")
    lines += path_lines(ran, spec, run)
    lines += ["", "## Bits per byte of the export on each language's held-out documents", "", "```",
              bpb_table(result.evaluate.result.models), "```", ""]
    return "\n".join(lines)


def path_lines(ran: TrainConfig, spec: BlendSpec, run: TrainedRun) -> list[str]:
    """What of the recipe ran: mixture, layout, precision, ramp-up, kernels, what was kept, the training."""
    precision = read_precision(run.paths.metrics)  # what the trainer ran: bf16, or fp32 on a CPU without bf16
    ds = (precision.apply(ran) if precision else ran).to_deepspeed_config(TP * PP)
    t = run.summary
    weights = ", ".join(f"{d.name} {d.weight:.4%}" for d in spec.datasets)
    return [
        f"- mixture: `{MIXTURE.name}` over {len(spec.datasets)} languages ({weights}); "
        f"train range {spec.train_range}, valid range {spec.valid_range}, seed {spec.seed}",
        f"- layout: TP {ran.parallel.tp} x PP {ran.parallel.pp} x DP 1, gloo; activation checkpointing "
        f"{'on' if ran.parallel.activation_checkpointing else 'off'}",
        f"- {precision.line() if precision else f'precision: {ran.optim.precision}'} (DeepSpeed ZeRO stage "
        f"{ds['zero_optimization']['stage']}, gradient accumulation in "
        f"{ds.get('data_types', {}).get('grad_accum_dtype', 'fp32')})",
        f"- batch ramp-up: {ramp_text(run.paths.metrics)}",
        f"- kernels {ran.model.kernels}, self-check: {kernels_text(run.paths.checkpoints)}"
        + ("; with attention dropout on (tr11's 0.1), attention runs over the full causal square with the "
           "ALiBi softmax kernel, not the block-causal path" if ran.model.attention_dropout else ""),
        f"- kept: data.compat={ran.data.compat} (BLOOM's index rules); dropout {ran.model.hidden_dropout} / "
        f"{ran.model.attention_dropout}; lr {ran.optim.lr:g} -> {ran.optim.min_lr:g}",
        f"- training: {t.iterations if t else None} iterations, final loss "
        f"{t.final_loss if t else float('nan'):.4f}, validation loss "
        f"{t.valid_loss if t and t.valid_loss is not None else float('nan'):.4f}",
    ]


@flow(name="bloom-rehearsal")
@user_errors
def rehearsal_flow(config: RehearsalConfig = RehearsalConfig()) -> RehearsalResult:
    """BLOOM-176B's tr11 path scaled down: mixture, BLOOM tokenizer, datasets, blend, the tr11 recipe (TP 2 x PP 2),
    export and per-language evaluation, with every override of the recipe listed (stages done are skipped)."""
    log = get_run_logger()
    started = time.time()
    # the pipeline ending Failed or Cancelled ends the rehearsal the same way, "pipeline stage ...: <its message>"
    result = stage_result("pipeline", bloom_pipeline(pipeline_config(config), return_state=True), PipelineResult)
    root = Path(result.out_dir)
    # the config the trainer read, against the recipe (an undeclared override: Failed with its one line)
    rows = override_rows(recipe_config(), load_config(result.train.result.paths.config), config.scale)
    rows += precision_rows(read_precision(result.train.result.paths.metrics))  # the trainer's hardware check
    seconds = time.time() - started
    stages = stage_seconds(root, started)
    overrides_md = overrides_markdown(rows, result.tokenizer.result.report.vocab_size, root)
    summary_md = summary_markdown(result, seconds, stages)
    create_markdown_artifact(overrides_md, key="rehearsal-overrides",
                             description=f"every override of {RECIPE.name} in the rehearsal, and why")
    create_markdown_artifact(summary_md, key="rehearsal-summary",
                             description="time per stage, the recipe's path as it ran, bits per byte per language")
    log.info("rehearsal: %d overrides of %s; %.0f s", len(rows), RECIPE.name, seconds)
    return RehearsalResult(pipeline=result, overrides=rows, stage_seconds=stages, seconds=seconds,
                           overrides_markdown=overrides_md, summary_markdown=summary_md)


def parser() -> ConfigParser[RehearsalConfig]:
    return ConfigParser(RehearsalConfig, "python -m flows.rehearsal", __doc__.split("\n\n")[0], sources=FLAGS_ONLY,
                        nested=True)


def main(argv: list[str] | None = None) -> int:
    try:
        config, _ = parser().parse(sys.argv[1:] if argv is None else argv)
    except BloomstackError as exc:
        print(f"flows.rehearsal: error: {exc}", file=sys.stderr)
        return 2
    setup(config.out_dir, "rehearsal")  # LOG_LEVEL=DEBUG prints everything

    def run() -> int:
        t0 = time.monotonic()
        state = rehearsal_flow(config, return_state=True)
        if ended_unfinished("flows.rehearsal", state, "the rehearsal"):
            return 1
        result = state.result()
        print(result.summary_markdown)
        print(result.overrides_markdown)
        print(f"(python -m flows.rehearsal: {time.monotonic() - t0:.0f} s, Prefect's start included; "
              f"everything is under {result.pipeline.out_dir}; the runs in the Prefect UI: python -m flows.ui "
              f"--out {config.out_dir})")
        return 0

    return run_entry_point("flows.rehearsal", run, database=database(config.out_dir))


if __name__ == "__main__":
    from flows.interrupts import exit_process

    exit_process(main())
