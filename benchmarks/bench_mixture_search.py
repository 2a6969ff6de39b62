"""Mixture search on the demo corpus: time for the proxies, held-out fit, and the proposal against the prior.

Builds the demo data the way the pipeline does (flows/demo_corpus, 10 languages: a 1,000-token BLOOM-style
tokenizer, one Megatron dataset per language with EOD), then runs ``bloomtrain mixture-search``'s
``run_search`` with a skewed prior (``--prior-alpha 1.0``, natural proportions) and ``--validate`` with three
seeds: proxies on the prior and on the proposal, the same tokens, seeds 0, 1, 2. Prints, against the issue's
targets (2 CPU cores):

- wall time of the search's proxies (target: 16 proxies in under 20 minutes);
- held-out Spearman and MAE of both regressors (target: Spearman >= 0.8 for the one that picks the proposal);
- the prior's and the proposal's measured objective (mean validation bits per byte over the 10 languages,
  mean over the three seeds) and the prior's seed spread (max - min over seeds); target: the improvement
  (prior - proposal) exceeds the spread. Reference: the prior's own proxies, run side by side.

    python benchmarks/bench_mixture_search.py                  # 16 proxies, 2 workers, fresh temp dir
    python benchmarks/bench_mixture_search.py --work /tmp/ms   # keep everything (a rerun reuses the proxies)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "flows" / "demo_corpus"
TARGET_SECONDS, TARGET_SPEARMAN = 20 * 60, 0.8


def build_demo_data(work: Path) -> tuple[Path, Path]:
    """(tokenizer dir, datasets dir) of the demo corpus, as flows.config's demo tokenizer and build."""
    from bloomdata.build import BuildConfig, run_build  # noqa: PLC0415
    from bloomdata.readers import SourceConfig  # noqa: PLC0415
    from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer  # noqa: PLC0415

    sources = [SourceConfig(paths=[str(p)], lang=p.name.split(".")[0]) for p in sorted(CORPUS.glob("*.jsonl.gz"))]
    tok, data = work / "tokenizer", work / "data"
    if not (tok / "tokenizer.json").exists():
        train_tokenizer(TokenizerTrainConfig(sources=sources, out_dir=str(tok), vocab_size=1000,
                                             byte_budget=4_000_000, min_frequency=2, show_progress=False))
    run_build(BuildConfig(sources=sources, tokenizer=str(tok), out_dir=str(data), append_eod=True, workers=0,
                          progress=False))
    return tok, data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=None, help="keep data and search here (default: a temp dir)")
    p.add_argument("--proxies", type=int, default=16)
    p.add_argument("--proxy-tokens", type=int, default=600_000)
    p.add_argument("--prior-alpha", type=float, default=1.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--seeds", type=int, default=3, help="validation seeds per mixture")
    args = p.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

    from bloomtrain.mixture_search.config import MixtureSearchConfig  # noqa: PLC0415
    from bloomtrain.mixture_search.run import run_search  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        tok, data = build_demo_data(work)
        config = MixtureSearchConfig(datasets_dir=str(data), tokenizer=str(tok), out_dir=str(work / "search"),
                                     prior_alpha=args.prior_alpha, proxies=args.proxies,
                                     proxy_tokens=args.proxy_tokens, workers=args.workers,
                                     validate_proposal=True, validate_seeds=args.seeds, progress=False)
        start = time.perf_counter()
        result = run_search(config)
        total = time.perf_counter() - start
        report(result, total, args)
        summary = work / "bench_mixture_search.json"
        summary.write_text(json.dumps(result.model_dump(mode="json"), indent=1))
    return 0


def report(result, total: float, args) -> None:
    v, s = result.validation, result.seconds
    print(f"mixture search on the demo corpus: {len(result.proxies)} proxies of {args.proxy_tokens:,} tokens, "
          f"{args.workers} workers, prior tokens ** {args.prior_alpha:g}; {os.cpu_count()} CPUs")
    ok_time = s["proxies"] < TARGET_SECONDS
    print(f"  proxies      {s['proxies']:7.1f} s  (target < {TARGET_SECONDS} s: {'met' if ok_time else 'MISSED'}); "
          f"fit and proposal {s['fit']:.1f} s; validation {s.get('validation', 0):.1f} s; total {total:.1f} s")
    for name, f in result.fit.items():
        mark = "  <- picked the proposal" if name == result.selected else ""
        print(f"  {name:<9} held-out Spearman {f.spearman:6.3f}  MAE {f.mae:.4f} bits per byte{mark}")
    ok_fit = result.fit[result.selected].spearman >= TARGET_SPEARMAN
    print(f"  fit          target Spearman >= {TARGET_SPEARMAN}: {'met' if ok_fit else 'MISSED'}")
    per_seed = ", ".join(f"{o:.4f}" for o in v.prior.objectives)
    print(f"  prior        objective {v.prior.objective:.4f}  (seeds {per_seed}; spread {v.prior.spread:.4f})")
    per_seed = ", ".join(f"{o:.4f}" for o in v.proposal.objectives)
    print(f"  proposal     objective {v.proposal.objective:.4f}  (seeds {per_seed}; spread {v.proposal.spread:.4f})")
    ratio = v.improvement / v.prior.spread if v.prior.spread > 0 else float("inf")
    ok_gain = v.improvement > v.prior.spread
    print(f"  improvement  {v.improvement:+.4f} bits per byte = {ratio:.1f}x the prior's seed spread "
          f"(target > 1x: {'met' if ok_gain else 'MISSED'})")
    print("  weights      " + ", ".join(f"{d.name} {d.prior:.3f}->{result.proposal.weights[d.name]:.3f}"
                                        for d in result.datasets))
    print(f"  all targets  {'met' if ok_time and ok_fit and ok_gain else 'NOT met'}", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
