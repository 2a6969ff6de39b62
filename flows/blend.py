"""``blend_flow``: tune per-language blend weights for a token budget, write the blend files, publish them.

The work is the library's own, called directly on the stage's ``BlendConfig`` (``BlendStageConfig``):
``tune_blend`` then ``write_blend``, the same two calls as ``bloomdata blend``, so the flow writes exactly the
files a user running the CLI gets (blend.yaml for the trainer, blend.json, blend.md, blend.png). The flow
adds the stage marker, a table artifact (tokens, weight, tokens drawn, effective epochs per language) and
a Markdown artifact with the chart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from bloomdata.mixture.report import over_repeated, write_blend
from bloomdata.mixture.tune import BlendConfig, tune_blend
from flows.config import BlendStageConfig
from flows.failures import user_errors
from flows.report import png_markdown
from flows.stages import completed, config_hash, write_marker


@task(name="tune-blend")
def tune_blend_task(config: BlendConfig) -> dict[str, Any]:
    """The blend of ``config`` written into ``config.out_dir``; returns the spec (blend.json's content)."""
    spec = tune_blend(config)
    write_blend(spec, config.out_dir, config.max_epochs)
    for d in over_repeated(spec, config.max_epochs):
        get_run_logger().warning("blend: %s is repeated %.2f epochs (> %g)", d.name, d.epochs, config.max_epochs)
    return spec.model_dump(mode="json", exclude_none=True)


def blend_artifacts(spec: dict[str, Any], png: Path) -> None:
    # A mixture blend may have no token budget: no tokens drawn or epochs then (blend.json leaves them out).
    table = [{"language": d["name"], "tokens": d.get("tokens"), "weight": round(d["weight"], 5),
              "tokens drawn": d.get("tokens_drawn"),
              "epochs": None if d.get("epochs") is None else round(d["epochs"], 3)} for d in spec["datasets"]]
    weighed = f"the ratios of {spec['mixture']}" if spec.get("mixture") else f"alpha = {spec.get('alpha')}"
    budget = f"{spec['token_budget']:,} tokens" if spec.get("token_budget") else "no token budget"
    create_table_artifact(table, key="blend-weights", description=f"{weighed}, {budget}")
    md = [f"# Blend for {budget} ({weighed})", "", f"`{png.parent / 'blend.yaml'}`", ""]
    if png.exists():
        md.append(png_markdown(png, "blend"))
    create_markdown_artifact("\n".join(md), key="blend-chart", description="natural vs blended shares, epochs")


@flow(name="blend")
@user_errors
def blend_flow(prefixes: dict[str, str], config: BlendStageConfig = BlendStageConfig(),
               upstream: list[str] | None = None) -> dict[str, Any]:
    """Weights per language (``prefixes``: name -> Megatron prefix, added to ``config.datasets``; blended in
    name order) for ``config.token_budget`` tokens."""
    log = get_run_logger()
    out = Path(config.out_dir).resolve()
    # the mixture file too (size and mtime): editing its ratios re-runs the stage
    digest = config_hash([config, prefixes], upstream=upstream or [], inputs=[config.mixture] if config.mixture else [])
    if marker := completed(out, digest):
        log.info("blend: skipped, %s already holds blend %s", out, digest)
        blend_artifacts(marker.summary["spec"], out / "blend.png")
        return marker.summary
    datasets = dict(sorted({**config.datasets, **prefixes}.items()))
    run = config.model_copy(update={"datasets": datasets, "out_dir": str(out)})
    log.info("blend: %d datasets, %s tokens, alpha %g -> %s", len(datasets), f"{run.token_budget:,}"
             if run.token_budget else "no budget", run.alpha, out)
    spec = tune_blend_task(run)
    blend_artifacts(spec, out / "blend.png")
    summary = {"blend_yaml": str(out / "blend.yaml"), "spec": spec, "hash": digest}
    write_marker(out, stage="blend", digest=digest, summary=summary, config=config,
                 outputs={"blend": out / "blend.yaml", "table": out / "blend.md"})
    return summary
