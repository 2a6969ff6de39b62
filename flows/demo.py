"""``python -m flows.demo [--corpus PATH] [--out DIR]``: the whole pipeline on a laptop, in minutes.

Runs ``bloom_pipeline`` on its embedded defaults: the 10-language corpus shipped in flows/demo_corpus (or
``--corpus``: a jsonl[.gz|.zst], parquet, arrow or txt file, a directory of them, or an HF ``save_to_disk``
directory, with the language in a per-row field), a local Dask cluster for the build, and a tiny BLOOM
trained on CPU by torchrun with gloo over 2 processes, tensor-parallel over both. Prefect is local: with no
``PREFECT_API_URL`` set, Prefect starts a temporary server for the run (runs, logs and artifacts are
visible while it runs; ``prefect server start`` first to keep them, see docs/flows.md). A second run with
the same arguments finds every stage done and only prints the summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from bloomdata.errors import BloomstackError
from bloomdata.readers import SourceConfig


def corpus_sources(path: str, text_field: str, lang_field: str, lang: str | None) -> list[SourceConfig]:
    target = Path(path)
    if not target.exists() and not any(ch in path for ch in "*?["):
        raise BloomstackError(f"--corpus {path}: no such file or directory")
    return [SourceConfig(paths=[str(target.resolve()) if target.exists() else path], text_field=text_field,
                         lang_field=lang_field, lang=lang)]


def _num(d: dict, key: str, spec: str) -> str:
    return "n/a" if d.get(key) is None else format(d[key], spec)


def report(result: dict) -> str:
    t, e = result["train"], result["export"]
    langs = ", ".join(f"{k} {v['tokens']:,}" for k, v in sorted(result["dataset"]["outputs"].items()))
    lines = [
        "",
        "bloom_pipeline finished. Everything is under " + result["out_dir"],
        f"  tokenizer    {result['tokenizer']['tokenizer_dir']}  ({result['tokenizer']['vocab_size']} tokens)",
        f"  datasets     {result['dataset']['out_dir']}  ({langs})",
        f"  blend        {result['blend']['blend_yaml']}  (+ blend.md, blend.png)",
        f"  training     {Path(t['paths']['config']).parent}  (train.yaml, logs/metrics.jsonl, loss.png)",
        f"  checkpoints  {t['paths']['checkpoints']}",
        f"  HF model     {e['hf_dir']}  (BloomForCausalLM.from_pretrained)",
        f"  final loss {_num(t, 'final_loss', '.4f')}  perplexity {_num(t, 'perplexity', '.2f')}  validation loss "
        f"{_num(t, 'valid_loss', '.4f')} (ppl {_num(t, 'valid_ppl', '.2f')})  {_num(t, 'tokens_per_s', ',.0f')} tokens/s",
        f"  exported model, same validation samples: loss {_num(e.get('evaluation') or {}, 'loss', '.4f')}",
        "  samples (greedy, from the exported model):",
    ]
    lines += [f"    {json.dumps(s, ensure_ascii=False)}" for s in e["samples"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", help="your documents instead of the embedded demo corpus")
    ap.add_argument("--text-field", default="text", help="--corpus: the text column/field")
    ap.add_argument("--lang-field", default="lang", help="--corpus: the per-row language field")
    ap.add_argument("--lang", default=None, help="--corpus: one language for every document")
    ap.add_argument("--out", default="demo_out", help="output directory (default: demo_out)")
    ap.add_argument("--workers", type=int, default=2, help="Dask LocalCluster worker processes")
    ap.add_argument("--scheduler", default=None, help="tcp://host:port of an existing Dask scheduler instead")
    ap.add_argument("--train-iters", type=int, default=None, help="override the training length")
    args = ap.parse_args(argv)

    from flows.config import PipelineConfig  # noqa: PLC0415 - keep --help fast
    from flows.pipeline import bloom_pipeline  # noqa: PLC0415

    try:
        config = PipelineConfig(out_dir=args.out)
        if args.corpus:
            config.corpus = corpus_sources(args.corpus, args.text_field, args.lang_field, args.lang)
        config.dataset = config.dataset.model_copy(update={"workers": args.workers, "scheduler": args.scheduler})
        if args.train_iters:
            tree = config.train.train.model_dump()
            samples = args.train_iters * tree["schedule"]["global_batch_size"]
            tree["schedule"].update(train_iters=args.train_iters, decay_samples=samples,
                                    warmup_samples=min(tree["schedule"]["warmup_samples"], samples // 10))
            tree["logging"].update(eval_interval=min(tree["logging"]["eval_interval"], args.train_iters),
                                   log_interval=min(tree["logging"]["log_interval"], args.train_iters))
            config.train.train = type(config.train.train).model_validate(tree)
    except BloomstackError as exc:
        print(f"flows.demo: error: {exc}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    state = bloom_pipeline(config, return_state=True)
    if not state.is_completed():
        print(f"flows.demo: the pipeline ended {state.name}: {state.message}", file=sys.stderr)
        print("flows.demo: fix the cause and run the same command again: finished stages are skipped",
              file=sys.stderr)
        return 1
    print(report(state.result()))
    print(f"  ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
