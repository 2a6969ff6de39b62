"""``blend_flow``: tune per-language blend weights for a token budget, write the blend files, publish them.

The work is the library's own, called directly on the stage's ``BlendConfig`` (``BlendStageConfig``):
``tune_blend`` then ``write_blend``, the same two calls as ``bloomdata blend``, so the flow writes exactly the
files a user running the CLI gets (blend.yaml for the trainer, blend.json, blend.md, blend.png). The flow
adds skip-or-run (``flows.stages.Stage``; the result is a ``TunedBlend``: the YAML's path and content), a
table artifact (tokens, weight, tokens drawn, effective epochs per language) and
a Markdown artifact with the chart.
"""

from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from bloomdata.blend.report import over_repeated, write_blend
from bloomdata.blend.tune import BlendConfig, tune_blend
from bloomdata.config_loader import derive
from flows.config import BlendStageConfig
from flows.failures import user_errors
from flows.report import png_markdown
from flows.results import BlendResult, TunedBlend
from flows.stages import Stage, stage_key


@task(name="tune-blend")
def tune_blend_task(config: BlendConfig) -> TunedBlend:
    """The blend of ``config`` written into ``config.out_dir`` (blend.yaml, blend.json, blend.md, blend.png)."""
    spec = tune_blend(config)
    write_blend(spec, config.out_dir, config.max_epochs)
    for d in over_repeated(spec, config.max_epochs):
        get_run_logger().warning("blend: %s is repeated %.2f epochs (> %g)", d.name, d.epochs, config.max_epochs)
    return TunedBlend(blend_yaml=str(Path(config.out_dir) / "blend.yaml"), spec=spec)


def blend_artifacts(tuned: TunedBlend) -> None:
    spec, png = tuned.spec, Path(tuned.blend_yaml).parent / "blend.png"
    # A mixture blend may have no token budget: no tokens drawn or epochs then (blend.json leaves them out).
    table = [{"language": d.name, "tokens": d.tokens, "weight": round(d.weight, 5), "tokens drawn": d.tokens_drawn,
              "epochs": None if d.epochs is None else round(d.epochs, 3)} for d in spec.datasets]
    weighed = f"the ratios of {spec.mixture}" if spec.mixture else f"alpha = {spec.alpha}"
    budget = f"{spec.token_budget:,} tokens" if spec.token_budget else "no token budget"
    create_table_artifact(table, key="blend-weights", description=f"{weighed}, {budget}")
    md = [f"# Blend for {budget} ({weighed})", "", f"`{tuned.blend_yaml}`", ""]
    if png.exists():
        md.append(png_markdown(png, "blend"))
    create_markdown_artifact("\n".join(md), key="blend-chart", description="natural vs blended shares, epochs")


@flow(name="bloom-blend")
@user_errors
def blend_flow(prefixes: dict[str, str], config: BlendStageConfig = BlendStageConfig(),
               upstream: list[str] | None = None) -> BlendResult:
    """Weights per language (``prefixes``: name -> Megatron prefix, added to ``config.datasets``; blended in
    name order) for ``config.token_budget`` tokens."""
    out = Path(config.out_dir).resolve()
    # the mixture file too (size and mtime): editing its ratios re-runs the stage
    key = stage_key([config, prefixes], upstream=upstream or [], inputs=[config.mixture] if config.mixture else [])
    datasets = dict(sorted({**config.datasets, **prefixes}.items()))
    run = derive(config, datasets=datasets, out_dir=str(out))

    def tune() -> TunedBlend:
        get_run_logger().info("blend: %d datasets, %s tokens, alpha %g -> %s", len(datasets),
                              f"{run.token_budget:,}" if run.token_budget else "no budget", run.alpha, out)
        return tune_blend_task(run)

    return Stage("blend", out, key, TunedBlend, config).run(
        tune, outputs=lambda _: {"blend": out / "blend.yaml", "table": out / "blend.md"}, publish=blend_artifacts)
