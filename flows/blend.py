"""``blend_flow``: tune per-language blend weights for a token budget (``bloomdata blend``), publish them.

The work is ``bloomdata blend`` itself, called through its ``main(argv)`` so the flow writes exactly the
files a user running the CLI gets (blend.yaml for the trainer, blend.json, blend.md, blend.png). The flow
adds the stage marker, a table artifact (tokens, weight, tokens drawn, effective epochs per language) and
a Markdown artifact with the chart.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from bloomdata.cli import blend as blend_cli
from bloomdata.errors import BloomstackError
from flows.config import BlendStageConfig
from flows.stages import completed, config_hash, write_marker


def blend_argv(config: BlendStageConfig, prefixes: dict[str, str], out_dir: str) -> list[str]:
    """The ``bloomdata blend`` command line for this config (also logged, so a run can be replayed)."""
    argv = ["--budget", str(config.token_budget), "--alpha", str(config.alpha), "--out", out_dir,
            "--max-epochs", str(config.max_epochs), "--split", config.split]
    for name, prefix in sorted(prefixes.items()):
        argv += ["--dataset", f"{name}={prefix}"]
    if config.floor is not None:
        argv += ["--floor", str(config.floor)]
    if config.cap is not None:
        argv += ["--cap", str(config.cap)]
    for name, weight in sorted(config.overrides.items()):
        argv += ["--override", f"{name}={weight}"]
    if config.seq_length is not None:
        argv += ["--seq-length", str(config.seq_length)]
    if config.seed is not None:
        argv += ["--seed", str(config.seed)]
    return argv


@task(name="tune-blend")
def tune_blend(argv: list[str]) -> dict[str, Any]:
    rc = blend_cli.main(argv)
    if rc:
        raise BloomstackError(f"bloomdata blend {' '.join(argv)} exited with {rc}")
    out = Path(argv[argv.index("--out") + 1])
    return json.loads((out / "blend.json").read_text())


def blend_artifacts(spec: dict[str, Any], png: Path) -> None:
    table = [{"language": d["name"], "tokens": d["tokens"], "weight": round(d["weight"], 5),
              "tokens drawn": d["tokens_drawn"], "epochs": round(d["epochs"], 3)} for d in spec["datasets"]]
    create_table_artifact(table, key="blend-weights",
                          description=f"alpha={spec.get('alpha')}, budget {spec.get('token_budget'):,} tokens")
    md = [f"# Blend for {spec.get('token_budget'):,} tokens (alpha = {spec.get('alpha')})", "",
          f"`{png.parent / 'blend.yaml'}`", ""]
    if png.exists():
        md.append(f"![blend](data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()})")
    create_markdown_artifact("\n".join(md), key="blend-chart", description="natural vs blended shares, epochs")


@flow(name="blend")
def blend_flow(prefixes: dict[str, str], config: BlendStageConfig = BlendStageConfig(),
               upstream: list[str] | None = None) -> dict[str, Any]:
    """Weights per language (``prefixes``: name -> Megatron prefix) for ``config.token_budget`` tokens."""
    log = get_run_logger()
    out = Path(config.out_dir).resolve()
    digest = config_hash([config, prefixes], upstream=upstream or [])
    if marker := completed(out, digest):
        log.info("blend: skipped, %s already holds blend %s", out, digest)
        blend_artifacts(marker.summary["spec"], out / "blend.png")
        return marker.summary
    argv = blend_argv(config, prefixes, str(out))
    log.info("blend: bloomdata blend %s", " ".join(argv))
    spec = tune_blend(argv)
    blend_artifacts(spec, out / "blend.png")
    summary = {"blend_yaml": str(out / "blend.yaml"), "spec": spec, "hash": digest}
    write_marker(out, stage="blend", digest=digest, summary=summary, config=config,
                 outputs={"blend": out / "blend.yaml", "table": out / "blend.md"})
    for d in spec["datasets"]:
        if d["epochs"] > config.max_epochs:
            log.warning("blend: %s is repeated %.2f epochs (> %g)", d["name"], d["epochs"], config.max_epochs)
    return summary
