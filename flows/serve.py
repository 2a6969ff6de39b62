"""``python -m flows.serve``: register a deployment per flow and for the pipeline, then run what is asked.

One long-running process (``prefect.serve``): it registers the deployments below with the Prefect API
(``PREFECT_API_URL``; see docs/flows.md for a local server), polls for their runs, and executes each in a
subprocess. Runs come from the UI, ``prefect deployment run 'bloom-pipeline/end-to-end-served' --param ...``
or ``run_deployment``. Every deployment's defaults are the embedded demo's, so each runs as is; the parameter
schema is the flows' pydantic configs, validated by the server before a run starts.

Each deployment is named after what it runs (``DEPLOYMENTS``): prefect.yaml declares the same flows under those
names for ``prefect deploy`` onto a process work pool (a worker runs them, after its pull steps fetch the
code), and this process serves them as ``<name>-served``. The names differ on purpose: serving a deployment
that ``prefect deploy`` created keeps its pull steps, and its runs then crash looking for flow storage.
"""

from __future__ import annotations

import sys
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.errors import BloomstackError

# The deployment of each flow, named after what it runs with its default parameters (the demo's): prefect.yaml's
# names; `python -m flows.serve` adds SERVED. Flow names are "bloom-<stage>", so "bloom-train/launch-training".
DEPLOYMENTS = {
    "bloom-pipeline": "end-to-end",  # corpus -> clean -> tokenizer -> datasets -> blend -> train -> export -> eval
    "bloom-clean": "clean-corpus",
    "bloom-tokenizer": "train-tokenizer",
    "bloom-dataset": "build-megatron-datasets",
    "bloom-blend": "tune-blend-weights",
    "bloom-mixture-search": "regmix-proxies",
    "bloom-train": "launch-training",
    "bloom-export": "export-to-transformers",
    "bloom-evaluate": "bits-per-byte",
    "bloom-rehearsal": "tr11-on-cpu",
}
SERVED = "-served"  # suffix of the deployments this process serves (never the same as a pool deployment's)

# Flows whose parameters may be partial configs ({"train": {"schedule": {"train_iters": 50}}}): their
# pydantic models complete a partial dict from the demo's defaults (bloomdata.config_loader.complete), but the
# server checks parameters against the JSON schema *before* that, where the embedded library configs
# (TrainConfig.model, TokenizerTrainConfig.sources) are required. So the server's check is off for them;
# the flow validates the completed config as it starts and fails at once, naming the field, when it is wrong.
PARTIAL_PARAMETERS = frozenset({"bloom-pipeline", "bloom-train"})


def deployments() -> list[Any]:
    """The RunnerDeployments of every flow; parameter defaults are the flows' own (the demo's)."""
    from flows.blend import blend_flow  # noqa: PLC0415 - keep `--help` fast
    from flows.clean import clean_flow  # noqa: PLC0415
    from flows.data import dataset_flow, tokenizer_flow  # noqa: PLC0415
    from flows.evaluate import evaluate_flow  # noqa: PLC0415
    from flows.export import export_flow  # noqa: PLC0415
    from flows.mixture_search import mixture_search_flow  # noqa: PLC0415
    from flows.pipeline import bloom_pipeline  # noqa: PLC0415
    from flows.rehearsal import rehearsal_flow  # noqa: PLC0415
    from flows.train import train_flow  # noqa: PLC0415

    flows = (bloom_pipeline, clean_flow, tokenizer_flow, dataset_flow, blend_flow, mixture_search_flow, train_flow,
             export_flow, evaluate_flow, rehearsal_flow)
    return [f.to_deployment(name=DEPLOYMENTS[f.name] + SERVED, tags=["bloomstack"],
                            description=(f.description or "").split("\n")[0],
                            enforce_parameter_schema=f.name not in PARTIAL_PARAMETERS)
            for f in flows]


def deployment_names() -> list[str]:
    return [f"{d.flow_name}/{d.name}" for d in deployments()]


class ServeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    limit: int | None = Field(None, ge=1, description="most flow runs at once (default: no limit)")


def parser() -> ConfigParser[ServeConfig]:
    return ConfigParser(ServeConfig, "python -m flows.serve", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def main(argv: list[str] | None = None) -> int:
    try:
        config, _ = parser().parse(sys.argv[1:] if argv is None else argv)
    except BloomstackError as exc:
        print(f"flows.serve: error: {exc}", file=sys.stderr)
        return 2
    from prefect import serve  # noqa: PLC0415

    from flows.interrupts import run_entry_point  # noqa: PLC0415

    def run() -> int:
        serve(*deployments(), limit=config.limit)
        return 0

    return run_entry_point("flows.serve", run)


if __name__ == "__main__":
    from flows.interrupts import exit_process

    exit_process(main())
