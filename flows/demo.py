"""``python -m flows.demo [--corpus PATH] [--out DIR]``: the whole pipeline on a laptop, in minutes.

Runs ``bloom_pipeline`` on its embedded defaults: the 10-language corpus shipped in flows/demo_corpus (or
``--corpus``: a jsonl[.gz|.zst], parquet, arrow or txt file, a directory of them, or an HF ``save_to_disk``
directory, with the language in a per-row field), cleaned with ``bloomdata clean``'s defaults, a local Dask
cluster for the clean and the build, and a tiny BLOOM trained on CPU by torchrun with gloo over 2 processes,
tensor-parallel over both. Prefect is local: with no ``PREFECT_API_URL`` set, a temporary server records the
runs in ``OUT/prefect/prefect.db``, and ``python -m flows.ui --out OUT`` (``make ui``) serves the Prefect UI on
them afterwards; the last lines say so, with the link to the pipeline's run. The console shows each stage's
start and end, progress bars, summaries, warnings and errors; other libraries' output goes to
``OUT/logs/demo.log`` (flows.console; ``--verbose`` prints it all). A second run with the same arguments finds
every stage done and only prints the summary.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.config_loader import DASHBOARD, cli_option, derive
from bloomdata.errors import BloomstackError
from bloomdata.readers import SourceConfig
from bloomdata.readers.fs import is_remote

if TYPE_CHECKING:  # the pipeline's modules import Prefect and torch: not for --help
    from bloomdata.clean.summary import CleanSummary
    from bloomtrain.config import TrainConfig
    from flows.config import PipelineConfig
    from flows.results import PipelineResult


class DemoConfig(BaseModel):
    """What ``python -m flows.demo`` changes in the pipeline's demo defaults (flags generated from it)."""

    model_config = ConfigDict(extra="forbid")

    corpus: list[SourceConfig] = Field(
        default_factory=list, json_schema_extra=cli_option("--corpus", metavar="PATH"),
        description="your documents instead of the embedded demo corpus: a jsonl[.gz|.zst], parquet, arrow or txt "
                    "file, a directory of them or an HF save_to_disk directory (LANG=PATH: all in one language)")
    out_dir: str = Field("demo_out", description="output directory",
                         json_schema_extra=cli_option("--out", metavar="DIR"))
    workers: int = Field(2, ge=0, description="Dask LocalCluster worker processes")
    scheduler: str | None = Field(None, description="tcp://host:port of an existing Dask scheduler instead",
                                  json_schema_extra=cli_option(metavar="ADDR"))
    dashboard: bool = Field(False, description="the clean and dataset stages: " + DASHBOARD)
    train_iters: int | None = Field(None, ge=1, description="override the training length")
    verbose: bool = Field(False, description="print every library's output on the console as it comes (DEBUG with "
                                             "LOG_LEVEL=DEBUG); otherwise it goes to OUT/logs/demo.log")


def parser() -> ConfigParser[DemoConfig]:
    return ConfigParser(DemoConfig, "python -m flows.demo", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def corpus_sources(sources: list[SourceConfig]) -> list[SourceConfig]:
    """The --corpus sources with their local paths checked (a glob or a URL is left to the readers) and made
    absolute."""
    checked = []
    for source in sources:
        paths = []
        for path in source.paths:
            if is_remote(path):  # s3://, https://, ...: checked by the readers, as globs are
                paths.append(path)
                continue
            target = Path(path)
            if not target.exists() and not any(ch in path for ch in "*?["):
                raise BloomstackError(f"--corpus {path}: no such file or directory")
            paths.append(str(target.resolve()) if target.exists() else path)
        checked.append(derive(source, paths=paths))
    return checked


def _num(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _clean_line(cleaned: CleanSummary) -> str:
    c = cleaned
    removed = ", ".join(f"{k} {v}" for k, v in c.removed.items() if v) or "none"
    return (f"  cleaned      {c.data_dir}  ({c.documents_kept:,} of {c.documents_in:,} documents kept; removed: "
            f"{removed}; {c.emails_redacted} e-mail and {c.ips_redacted} IP addresses redacted; clean.md, clean.png)")


def report(result: PipelineResult, seconds: float | None = None) -> str:
    """Where everything is, the headline numbers and samples, then the per-language bits-per-byte table last."""
    from bloomtrain.card import CARD_FILE  # noqa: PLC0415 - keep --help fast
    from flows.evaluate import bpb_table  # noqa: PLC0415

    run, exported, ev = result.train.result, result.export.result, result.evaluate.result
    t = run.summary
    langs = ", ".join(f"{k} {v.tokens:,}" for k, v in sorted(result.dataset.result.outputs.items()))
    lines = ["", "bloom_pipeline finished. Everything is under " + result.out_dir]
    if result.clean is not None:
        lines.append(_clean_line(result.clean.result))
    lines += [
        f"  tokenizer    {result.tokenizer.result.tokenizer_dir}  ({result.tokenizer.result.report.vocab_size} tokens)",
        f"  datasets     {result.dataset.result.out_dir}  ({langs})",
        f"  blend        {result.blend.result.blend_yaml}  (+ blend.md, blend.png)",
        f"  training     {Path(run.paths.config).parent}  (train.yaml, logs/metrics.jsonl, loss.png)",
        f"  checkpoints  {run.paths.checkpoints}",
        f"  HF model     {exported.hf_dir}  (BloomForCausalLM.from_pretrained; model card {CARD_FILE})",
        f"  evaluation   {Path(ev.eval_json).parent}  (eval.json, eval.md, eval.png; held-out text in heldout/)",
        "  final loss n/a (no metrics.jsonl)" if t is None else
        f"  final loss {t.final_loss:.4f}  perplexity {t.perplexity:.2f}  validation loss "
        f"{_num(t.valid_loss, '.4f')} (ppl {_num(t.valid_ppl, '.2f')})  {_num(t.tokens_per_s, ',.0f')} tokens/s",
        f"  exported model, same validation samples: loss "
        f"{_num(exported.evaluation.loss if exported.evaluation else None, '.4f')}",
        "  samples (greedy, from the exported model):",
    ]
    lines += [f"    {json.dumps(s, ensure_ascii=False)}" for s in exported.samples]
    if seconds is not None:
        lines.append(f"  ({seconds:.0f} s)")
    docs = sum(h.docs for h in ev.heldout) if ev.heldout else None
    lines += ["", "Bits per byte on held-out text (lower is better; "
              + (f"{docs} validation documents never trained on):" if docs is not None else "the stage's sources):"),
              *("  " + row for row in bpb_table(ev.models).splitlines())]
    return "\n".join(lines)


def pipeline_config(args: DemoConfig) -> PipelineConfig:
    """The pipeline's demo defaults with what the command changes: corpus, output, Dask, training length."""
    from flows.config import PipelineConfig  # noqa: PLC0415 - keep --help fast

    config = PipelineConfig(out_dir=args.out_dir)
    dask = {"workers": args.workers, "scheduler": args.scheduler, "dashboard": args.dashboard}
    changes: dict[str, Any] = {"dataset": derive(config.dataset, **dask),
                               "clean": derive(config.clean, **dask) if config.clean else None}
    if args.corpus:
        changes["corpus"] = corpus_sources(args.corpus)
    if args.train_iters:
        changes["train"] = derive(config.train, train=shorter(config.train.train, args.train_iters))
    return derive(config, **changes)


def shorter(train: TrainConfig, iters: int) -> TrainConfig:
    """``train`` run for ``iters`` iterations: the decay over the whole run, warmup and intervals within it."""
    s, log = train.schedule, train.logging
    samples = iters * s.global_batch_size
    schedule = derive(s, train_iters=iters, decay_samples=samples, warmup_samples=min(s.warmup_samples, samples // 10))
    logging = derive(log, eval_interval=min(log.eval_interval, iters) if log.eval_interval else None,
                     log_interval=min(log.log_interval, iters))
    return derive(train, schedule=schedule, logging=logging)


def ui_lines(out_dir: str, flow_run_id: object, external_ui: str | None) -> str:
    """Where to see the runs after the demo: the Prefect server it ran against, or ``flows.ui`` on its database."""
    from flows.ui import run_link, ui_command  # noqa: PLC0415

    if external_ui:
        return f"\nThe runs are on your Prefect server: {run_link(flow_run_id, external_ui)}"
    return (f"\nThe runs in the Prefect UI: `{ui_command(out_dir)}` serves it on {out_dir}'s database; the pipeline's "
            f"run is then at\n  {run_link(flow_run_id)}")


def main(argv: list[str] | None = None) -> int:
    try:
        args, _ = parser().parse(sys.argv[1:] if argv is None else argv)
        config = pipeline_config(args)
    except BloomstackError as exc:
        print(f"flows.demo: error: {exc}", file=sys.stderr)
        return 2
    from flows.console import setup  # noqa: PLC0415 - prefect, after the arguments are checked

    setup(args.out_dir, "demo", args.verbose)
    from prefect.settings import PREFECT_API_URL, PREFECT_UI_URL  # noqa: PLC0415

    from flows.failures import ended_unfinished  # noqa: PLC0415
    from flows.interrupts import run_entry_point  # noqa: PLC0415
    from flows.pipeline import bloom_pipeline  # noqa: PLC0415
    from flows.ui import database  # noqa: PLC0415

    api = PREFECT_API_URL.value()
    external_ui = (PREFECT_UI_URL.value() or api.removesuffix("/api")) if api else None  # the runs' own server

    def run() -> int:
        t0 = time.monotonic()
        state = bloom_pipeline(config, return_state=True)
        if ended_unfinished("flows.demo", state, "the pipeline"):
            print(ui_lines(args.out_dir, state.state_details.flow_run_id, external_ui))
            return 1
        print(report(state.result(), time.monotonic() - t0))
        print(ui_lines(args.out_dir, state.state_details.flow_run_id, external_ui))
        return 0

    return run_entry_point("flows.demo", run, database=database(args.out_dir))


if __name__ == "__main__":
    from flows.interrupts import exit_process

    exit_process(main())
