"""``mixture_search_flow``: blend weights found by proxy models (``bloomtrain mixture-search``), as a stage.

The work is the library's own (``bloomtrain.mixture_search.run.run_search`` on the stage's
``MixtureSearchConfig``), so the flow writes exactly the files a user running the command gets (blend.yaml,
search.json, search.md, search.png, proxies/). The flow adds skip-or-run (``flows.stages.Stage``: the result is
the search's ``SearchResult``; the key is the config without where the proxies run, the upstream keys, and the
datasets', tokenizer's, proxy recipe's and mixture file's sizes and mtimes), one log line per finished proxy,
and two artifacts: ``mixture-search-proxies`` (a table: each proxy's objective and weights, then the proposal,
predicted, the validated finalists and what blend.yaml holds) and ``mixture-search`` (search.md with search.png).

Finished proxies survive a failed or cancelled run in ``out_dir/proxies``, so a rerun trains only the rest.
In ``bloom_pipeline`` (``PipelineConfig.mixture_search``) the stage runs after the build and the mixture it
wrote (``SearchResult.choice``: the best measured, the prior where nothing beat it) becomes the blend stage's
weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from bloomdata.blend.tune import named_datasets
from bloomdata.config_loader import derive
from bloomdata.megatron.indexed import data_file_path, index_file_path
from bloomtrain.mixture_search.config import MixtureSearchConfig
from bloomtrain.mixture_search.report import SEARCH_JSON, SEARCH_MD, SEARCH_PNG
from bloomtrain.mixture_search.result import ProxyEntry, SearchResult
from flows.config import MixtureSearchStageConfig
from flows.failures import user_errors
from flows.report import png_markdown
from flows.results import MixtureSearchResult
from flows.stages import Stage, stage_key

# where and how the proxies run: not part of what the search finds
RUN_ONLY = {"workers", "threads", "scheduler", "dashboard", "slurm", "sbatch", "slurm_time", "env", "python",
            "progress"}


@task(name="mixture-search")
def search_task(config: MixtureSearchConfig) -> SearchResult:
    """``run_search`` (its files into ``config.out_dir``), logging each proxy as it finishes."""
    from bloomtrain.mixture_search.run import run_search  # noqa: PLC0415 - torch only when searching

    log = get_run_logger()

    def finished(done: int, total: int, proxy: ProxyEntry) -> None:
        log.info("mixture search: proxy %d/%d %s: objective %.4f bits per byte (%.0f s)", done, total, proxy.name,
                 proxy.objective, proxy.seconds)

    return run_search(config, on_proxy=finished)


def proxy_rows(result: SearchResult) -> list[dict[str, Any]]:
    """The table artifact: each proxy, the proposal (predicted), the validated finalists, then blend.yaml's."""
    names = [d.name for d in result.datasets]

    def row(label: str, objective: float, weights: dict[str, float]) -> dict[str, Any]:
        return {"mixture": label, "objective": round(objective, 4), **{n: round(weights[n], 4) for n in names}}

    rows = [row(p.name, p.objective, p.weights) for p in result.proxies]
    p, c = result.proposal, result.choice
    rows.append(row(f"proposal (predicted, {p.regressor})", p.predicted.objective, p.weights))
    if (v := result.validation) is not None:
        rows += [row(f"{m.name} (validated, seeds {v.seeds})", m.objective, m.weights)
                 for m in (v.proposal, v.prior, v.proxy) if m is not None]
    rows.append(row(f"blend.yaml: {c.name}{' (tie)' if c.tie else ''}", c.objective, c.weights))
    return rows


def search_artifacts(result: SearchResult) -> None:
    out = Path(result.out_dir)
    fit = result.fit[result.selected]
    create_table_artifact(proxy_rows(result), key="mixture-search-proxies",
                          description=f"objective and weights per mixture; {result.selected} fit, held-out "
                                      f"Spearman {fit.spearman:.3f}; {result.choice.reason}")
    md = (out / SEARCH_MD).read_text(encoding="utf-8") if (out / SEARCH_MD).exists() else ""
    if (out / SEARCH_PNG).exists():
        md += "\n" + png_markdown(out / SEARCH_PNG, "mixture search") + "\n"
    create_markdown_artifact(md, key="mixture-search", description="the proposal, the fit and every proxy")


def input_files(config: MixtureSearchConfig) -> list[str]:
    """What the search reads, whose change must re-run it: datasets, tokenizer, proxy recipe, mixture file."""
    prefixes = named_datasets(config.datasets, config.datasets_dir).values()
    tokenizer = Path(config.tokenizer)
    files = [f(p) for p in prefixes for f in (index_file_path, data_file_path)]
    files.append(str(tokenizer / "tokenizer.json" if tokenizer.is_dir() else tokenizer))
    return files + [f for f in (config.proxy_config, config.prior_mixture) if f]


@flow(name="bloom-mixture-search")
@user_errors
def mixture_search_flow(config: MixtureSearchStageConfig = MixtureSearchStageConfig(),
                        upstream: list[str] | None = None) -> MixtureSearchResult:
    """Search blend weights with proxy models (skipped when done); returns what blend.yaml holds, the proposal,
    the fit and every proxy."""
    out = Path(config.out_dir).resolve()
    run = derive(config, out_dir=str(out), progress=False)
    key = stage_key(run.model_dump(exclude=RUN_ONLY), upstream=upstream or [], inputs=input_files(run))
    return Stage("mixture-search", out, key, SearchResult, config).run(
        lambda: search_task(run), publish=search_artifacts,
        outputs=lambda r: {"blend": r.blend_yaml, "search": out / SEARCH_JSON, "table": out / SEARCH_MD})
