"""Mixture search on real tiny proxies: the prior against the blend the search writes, measured with seeds.

Two corpora, each built the way the pipeline builds data (a 1,000-token BLOOM-style tokenizer, one Megatron
dataset per language with EOD):

- ``demo``: flows/demo_corpus, 10 languages of unequal size (yo 30 documents ... en 160);
- ``skewed``: tests/data/corpus, en's 160 documents and the first 8-13 of fr, hi, sw, yo and zh (``SKEWED``):
  one large language with ~10x the tokens of each other (the case of issue 30, where the old search wrote a
  worse blend).

Per corpus, searches of 8 and then 16 proxies in one output directory (the 16 reuse the 8's proxies: the
design is nested) with the defaults (epoch caps at 4, validation of the prior, the proposal and the best proxy
on 2 seeds) and the prior at natural proportions (``--prior-alpha 1.0``). Then the prior and each written blend
are measured again on ``--fresh-seeds`` seeds the searches never saw (1000, 1001, ...), so that the figure is
not the selection's own luck. Reference: the prior, trained side by side with the same tokens and seeds.
Prints, per search: proxies' wall time, each regressor's held-out Spearman, the proposal's prediction, the
validated finalists, what blend.yaml holds, and written vs prior on the fresh seeds (target: written <= prior).

    python benchmarks/bench_mixture_search.py                       # demo, 8 and 16 proxies of 600k tokens
    python benchmarks/bench_mixture_search.py --corpus skewed --proxy-tokens 1e5
    python benchmarks/bench_mixture_search.py --work /tmp/ms        # keep everything (a rerun reuses proxies)
    python benchmarks/bench_mixture_search.py --proxies 16 --max-epochs 8   # wider bounds
    python benchmarks/bench_mixture_search.py --synthetic           # design and proposal rule, no training

``--synthetic`` (seconds, no proxies): a family of blend-quality laws with a known optimum (per dataset a
power law of its effective share, transfer from the others, an overfitting term past 1-3 epochs, and noise;
one dataset with 10x the tokens of the others, data for 1.7-3 proxy runs in all), searched by this search's
design and proposal rule and by RegMix's (Dirichlet draws around the prior, concentration 1-30; the mean of
the best 100 candidates), each with the same fits. Prints the share of the prior-to-optimum gain left
unrealized (regret / gap: 0 is the optimum, 1 the prior) and how often the proposal is worse than the prior
before validation (the case the gate and the selection by measurement are for).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "flows" / "demo_corpus"
SAMPLES = ROOT / "tests" / "data" / "corpus"
SKEWED = {"en": 160, "fr": 13, "hi": 11, "sw": 13, "yo": 13, "zh": 8}  # documents: en ~10x the tokens of each
FRESH_SEED = 1000


def corpus_files(name: str, work: Path) -> list[Path]:
    """The corpus's JSON-lines files, one per language (the skewed one written into ``work``)."""
    if name == "demo":
        return sorted(DEMO.glob("*.jsonl.gz"))
    out = work / "corpus"
    out.mkdir(parents=True, exist_ok=True)
    for lang, docs in SKEWED.items():
        with (SAMPLES / f"{lang}.jsonl").open(encoding="utf-8") as f:
            lines = [line for _, line in zip(range(docs), f)]
        with gzip.open(out / f"{lang}.jsonl.gz", "wt", encoding="utf-8") as g:
            g.writelines(lines)
    return sorted(out.glob("*.jsonl.gz"))


def build_data(files: list[Path], work: Path) -> tuple[Path, Path]:
    """(tokenizer dir, datasets dir): flows.config's demo tokenizer and build, on ``files``."""
    from bloomdata.build import BuildConfig, run_build  # noqa: PLC0415
    from bloomdata.readers import SourceConfig  # noqa: PLC0415
    from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer  # noqa: PLC0415

    sources = [SourceConfig(paths=[str(p)], lang=p.name.split(".")[0]) for p in files]
    tok, data = work / "tokenizer", work / "data"
    if not (tok / "tokenizer.json").exists():
        train_tokenizer(TokenizerTrainConfig(sources=sources, out_dir=str(tok), vocab_size=1000,
                                             byte_budget=4_000_000, min_frequency=2, show_progress=False))
    run_build(BuildConfig(sources=sources, tokenizer=str(tok), out_dir=str(data), append_eod=True, workers=0,
                          progress=False))
    return tok, data


def fresh(config, mixtures: dict[str, dict[str, float]], seeds: list[int]) -> dict[str, list[float]]:
    """Each mixture's objective per seed of ``seeds``, trained as the search's proxies (reused when present)."""
    from bloomtrain.mixture_search.run import prepare, train_mixtures  # noqa: PLC0415

    search = prepare(config, Path(config.out_dir))
    names = list(mixtures)
    rows = np.vstack([np.tile(search.space.vector(mixtures[n]), (len(seeds), 1)) for n in names])
    entries = train_mixtures(search, rows, seeds * len(names), [f"fresh-{n}-seed{s}" for n in names for s in seeds],
                             None, lambda entry: None)
    return {n: [e.objective for e in entries[i * len(seeds):(i + 1) * len(seeds)]] for i, n in enumerate(names)}


def report(corpus: str, result, seconds: float, measured: dict[str, list[float]]) -> dict:
    """Print one search's lines; return its summary row."""
    s, p, c, v = result.seconds, result.proposal, result.choice, result.validation
    print(f"{corpus}, {len(result.proxies)} proxies: proxies {s['proxies']:.0f} s, fit {s['fit']:.1f} s, "
          f"validation {s['validation']:.0f} s, search {seconds:.0f} s")
    print("  held-out Spearman " + ", ".join(f"{n} {f.spearman:.3f} (MAE {f.mae:.4f})" for n, f in result.fit.items())
          + f"; picked {result.selected}")
    print(f"  proposal predicted {p.predicted.objective:.4f} (prior measured {result.proxies[0].objective:.4f}, "
          f"{'passes' if p.better_than_prior else 'fails'} the gate)")
    if v is not None:
        for m in (v.prior, v.proposal, v.proxy):
            if m is not None:
                print(f"  validated {m.name:<9} {m.objective:.4f} (seeds {v.seeds}: "
                      f"{', '.join(f'{o:.4f}' for o in m.objectives)})")
    print(f"  blend.yaml: {c.name}; {c.reason}")
    prior, written = (np.array(measured[k]) for k in ("prior", "written"))
    gain, spread = prior.mean() - written.mean(), max(np.ptp(prior), np.ptp(written))
    ok = written.mean() <= prior.mean() + 1e-12
    print(f"  fresh seeds: prior {prior.mean():.4f} (spread {np.ptp(prior):.4f}), written {written.mean():.4f} "
          f"(spread {np.ptp(written):.4f}): prior - written {gain:+.4f} = "
          f"{gain / spread if spread > 0 else 0:.1f}x the spread "
          f"(target: written <= prior: {'met' if ok else 'MISSED'})")
    print("  weights prior -> written: "
          + ", ".join(f"{d.name} {d.prior:.3f}->{c.weights[d.name]:.3f} ({c.epochs[d.name]:.1f} ep)"
                      for d in result.datasets), flush=True)
    return {"corpus": corpus, "proxies": len(result.proxies), "choice": c.model_dump(), "fresh": measured,
            "seconds": seconds, "search": result.model_dump(mode="json")}


class Law:
    """A random blend-quality law over ``d`` datasets (see the module docstring), bits per byte per dataset."""

    def __init__(self, rng: np.random.Generator, d: int):
        share = np.ones(d)
        share[0] = 10.0  # one large dataset
        self.tokens = share * rng.uniform(0.7, 1.3, d)
        self.tokens *= rng.uniform(0.35, 0.6) / self.tokens.sum()  # in proxy runs: 1 = one proxy's tokens
        self.base, self.gain = rng.uniform(1.5, 4.0, d), rng.uniform(0.5, 2.0, d)
        self.beta, self.overfit, self.onset = rng.uniform(0.3, 0.6, d), rng.uniform(0.01, 0.08, d), rng.uniform(1, 3, d)
        transfer = rng.uniform(0, 1, (d, d))
        self.transfer = 0.15 * (transfer + transfer.T) / (2 * d) * (1 - np.eye(d))

    def bpb(self, w: np.ndarray) -> np.ndarray:
        epochs = w / self.tokens
        return (self.base + self.gain * (w + w @ self.transfer + 0.01) ** -self.beta
                + self.overfit * np.maximum(0, epochs - self.onset) ** 1.5)

    def optimum(self, lo: np.ndarray, hi: np.ndarray, starts: np.ndarray) -> float:
        from scipy.optimize import minimize  # noqa: PLC0415

        return min(minimize(lambda w: self.bpb(w).mean(), x, method="SLSQP", bounds=list(zip(lo, hi)),
                            constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1}]).fun for x in starts)


def synthetic_trial(law: Law, k: int, seed: int, fits: list[str]) -> dict[tuple[str, str], float]:
    """regret / gap of each (rule, fit) on one law with ``k`` proxies."""
    from bloomtrain.mixture_search import fit as fitting  # noqa: PLC0415
    from bloomtrain.mixture_search import space  # noqa: PLC0415
    from bloomtrain.mixture_search.propose import propose  # noqa: PLC0415

    d = len(law.tokens)
    lo, hi = np.zeros(d), np.minimum(1.0, 4 * law.tokens)
    prior = space.within_bounds((law.tokens / law.tokens.sum())[None, :], lo, hi)[0]
    rng = np.random.default_rng(seed)
    pool = space.uniform_in_bounds(rng, prior, lo, hi, space.POOL)
    candidates = np.vstack([space.uniform_in_bounds(rng, prior, lo, hi, 5000),
                            space.within_bounds(space._dirichlet(rng, prior, 5000, (1.0, 30.0)), lo, hi)])
    designs = {"this search": space.herd(pool, prior, k - 1, lo, hi),
               "RegMix": np.vstack([prior, space.within_bounds(space._dirichlet(rng, prior, k - 1, (1.0, 30.0)),
                                                               lo, hi)])}
    best = law.optimum(lo, hi, np.vstack([prior, pool[:8]]))
    gap, objective, scale = law.bpb(prior).mean() - best, np.full(d, 1.0 / d), 1.0 / law.tokens
    out = {}
    for rule, w in designs.items():
        y = law.bpb(w) + rng.normal(0, 0.01, (k, d))  # a proxy's noise
        fitted = fitting.fit_all(w, y, scale, objective, seed)
        for name in fits:
            f = fitting.choose(fitted, name)
            if name == "auto":
                out[(rule, f"picked {f.name}")] = 0.0
            if rule == "RegMix":
                tried = np.vstack([w, candidates])
                top = np.argsort(f.predict(tried) @ objective, kind="stable")[:100]
                proposal = space.within_bounds(tried[top].mean(0, keepdims=True), lo, hi)[0]
            else:
                proposal = propose(f, np.vstack([w, candidates]), objective, lo, hi, 100).weights
            out[(rule, name)] = float((law.bpb(proposal).mean() - best) / gap)
    return out


def synthetic(trials: int, proxies: list[int]) -> None:
    fits = ["power", "linear", "auto"]
    print(f"synthetic laws: {trials} per size, regret / gap of the proposal (0: the optimum, 1: the prior), "
          "mean and share worse than the prior, before validation")
    for d in (6, 10):
        for k in proxies:
            rows: dict[tuple[str, str], list[float]] = {}
            for t in range(trials):
                for key, value in synthetic_trial(Law(np.random.default_rng((d, t)), d), k, t, fits).items():
                    rows.setdefault(key, []).append(value)
            for (rule, name), values in sorted(rows.items()):
                v = np.array(values)
                if name.startswith("picked"):
                    print(f"  d={d:<2} {k:>2} proxies  {rule:<11} auto {name} in {len(v)} of {trials}")
                    continue
                print(f"  d={d:<2} {k:>2} proxies  {rule:<11} {name:<6} regret/gap {v.mean():6.3f} "
                      f"(median {np.median(v):.3f})  worse than the prior {np.mean(v > 1):4.0%}", flush=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", choices=("demo", "skewed"), default="demo")
    p.add_argument("--work", type=Path, default=None, help="keep data and searches here (default: a temp dir)")
    p.add_argument("--proxies", type=int, nargs="+", default=[8, 16])
    p.add_argument("--proxy-tokens", type=float, default=600_000)
    p.add_argument("--prior-alpha", type=float, default=1.0)
    p.add_argument("--max-epochs", type=float, default=4.0, help="the epoch cap (the search's default: 4)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--fresh-seeds", type=int, default=3, help="seeds the prior and written blends are re-measured on")
    p.add_argument("--synthetic", action="store_true", help="the design and proposal rule on synthetic laws instead")
    p.add_argument("--trials", type=int, default=20, help="with --synthetic: laws per size")
    args = p.parse_args(argv)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    if args.synthetic:
        synthetic(args.trials, sorted(args.proxies))
        return 0

    from bloomtrain.mixture_search.config import MixtureSearchConfig  # noqa: PLC0415
    from bloomtrain.mixture_search.run import run_search  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        work = (args.work or Path(tmp)) / args.corpus
        work.mkdir(parents=True, exist_ok=True)
        tok, data = build_data(corpus_files(args.corpus, work), work)
        print(f"mixture search on the {args.corpus} corpus: proxies of {int(args.proxy_tokens):,} tokens, "
              f"at most {args.max_epochs:g} epochs, {args.workers} workers, prior tokens ** {args.prior_alpha:g}; "
              f"{os.cpu_count()} CPUs", flush=True)
        rows, seeds = [], [FRESH_SEED + i for i in range(args.fresh_seeds)]
        for k in sorted(args.proxies):
            config = MixtureSearchConfig(datasets_dir=str(data), tokenizer=str(tok), out_dir=str(work / "search"),
                                         prior_alpha=args.prior_alpha, proxies=k, proxy_tokens=int(args.proxy_tokens),
                                         max_epochs=args.max_epochs, workers=args.workers, progress=False)
            start = time.perf_counter()
            result = run_search(config)
            seconds = time.perf_counter() - start
            prior = {d.name: d.prior for d in result.datasets}
            rows.append(report(args.corpus, result, seconds, fresh(config, {"prior": prior,
                                                                            "written": result.choice.weights}, seeds)))
        (work / f"bench_mixture_search-{args.max_epochs:g}.json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
