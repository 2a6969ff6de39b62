"""``export_flow``: checkpoint -> transformers ``BloomForCausalLM`` directory with its model card, then a generated
sample.

The conversion is ``bloomtrain.export.run_export`` on the stage's ``ExportConfig`` (``ExportStageConfig``: the
checkpoint, tokenizer and output directory; any TP x PP layout, merged). The samples, and in the pipeline the
loss on the training's own validation samples (``ExportCheck``), come from *transformers* on the exported
directory (``bloomtrain.evaluation.exported``), not from our model code: they prove the export loads and
runs where users will load it, and is the trained model. Runs in the flow process (one small model, CPU is
fine). The result is an ``ExportedModel`` (``flows.results``).

The model card (README.md, ``bloomtrain.card``) follows the stage's card settings (``CardConfig`` fields: licence,
clean summary, fertility, ...), which are not part of the stage's key: changing them rebuilds the card from the
records (``model_card_task``, after the stage, skipped or not), never the weights. In the pipeline the card is
rebuilt once more after the evaluation, with its eval.json.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from bloomdata.config_loader import derive
from bloomtrain.config import CardConfig, ExportConfig
from bloomtrain.evaluation.exported import BlendLoss, blend_loss, greedy_samples
from flows.config import ExportCheck, ExportStageConfig
from flows.failures import transient, user_errors
from flows.results import ExportedModel, ExportResult
from flows.stages import Stage, stage_key


@task(name="export-hf", retries=1, retry_delay_seconds=2, retry_condition_fn=transient)
def export_task(config: ExportConfig) -> str:
    from bloomtrain.export import run_export  # noqa: PLC0415 - torch is paid only when exporting

    return str(run_export(config))


@task(name="model-card")
def model_card_task(hf_dir: str, card: CardConfig) -> str:
    """Rebuild the export's README.md from its records, with ``card``'s set fields replacing the stored ones."""
    from bloomtrain.card import rebuild_model_card  # noqa: PLC0415

    return str(rebuild_model_card(Path(hf_dir), card))


@task(name="generate-sample")
def sample_task(hf_dir: str, prompts: list[str], max_new_tokens: int, seed: int) -> list[str]:
    """Greedy continuations from the exported model, loaded by transformers with its tokenizer files."""
    return greedy_samples(hf_dir, prompts, max_new_tokens, seed)


@task(name="evaluate-hf")
def evaluate_task(hf_dir: str, check: ExportCheck) -> BlendLoss:
    """The exported model's loss on the trainer's own first validation samples (``blend_loss``)."""
    return blend_loss(hf_dir, check.splits(), check.samples)


def samples_artifact(exported: ExportedModel, check: ExportCheck | None) -> None:
    md = [f"# Export\n\n`{exported.hf_dir}` loads with `BloomForCausalLM.from_pretrained`.\n"]
    if (e := exported.evaluation) is not None and check is not None:
        md.append(f"Validation loss of the exported model: {e.loss:.4f} (perplexity {e.ppl:.2f}, {e.samples} samples "
                  f"of `{check.blend}`).\n")
    md.append("## Samples (greedy)\n")
    md += [f"- `{s!r}`" for s in exported.samples] or ["(no tokenizer in the export: no samples)"]
    create_markdown_artifact("\n".join(md), key="export-samples", description="exported model and samples")


def _export(config: ExportStageConfig, check: ExportCheck | None) -> ExportedModel:
    log = get_run_logger()
    hf_dir = export_task(config)
    samples = sample_task(hf_dir, config.prompts, config.max_new_tokens, config.seed) \
        if (Path(hf_dir) / "tokenizer.json").exists() else []
    for s in samples:
        log.info("sample: %r", s)
    evaluation = evaluate_task(hf_dir, check) if check is not None else None
    if evaluation is not None:
        log.info("export: validation loss %.4f (ppl %.2f) over %d samples", evaluation.loss, evaluation.ppl,
                 evaluation.samples)
    exported = ExportedModel(hf_dir=hf_dir, samples=samples, evaluation=evaluation)
    samples_artifact(exported, check)
    return exported


@flow(name="bloom-export")
@user_errors
def export_flow(config: ExportStageConfig = ExportStageConfig(), check: ExportCheck | None = None,
                upstream: list[str] | None = None) -> ExportResult:
    """Export ``config.checkpoint`` to a transformers directory with its model card, score it on ``check``'s
    validation samples (when given) and generate samples from it (skipped when done; the card follows the card
    settings either way)."""
    out = Path(config.out_dir).resolve()
    key = stage_key([config.model_dump(exclude=set(CardConfig.model_fields)), check], upstream=upstream or [])
    exported = Stage("export", out, key, ExportedModel, config).run(
        lambda: _export(derive(config, out_dir=str(out)), check),
        outputs=lambda exported: {"model": Path(exported.hf_dir) / "model.safetensors"})
    if exported.skipped:
        model_card_task(exported.result.hf_dir, config.card_settings(given_only=True))
    return exported
