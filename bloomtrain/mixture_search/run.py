"""``run_search``: the composition root of ``bloomtrain mixture-search`` (the flow calls it too).

    datasets + prior + epoch-aware bounds (space) -> K mixtures, the prior and a space-filling design (space)
      -> proxies (durable jobs, in parallel) -> regressions with held-out scores (fit)
      -> the fit's best mixture within the bounds, if predicted better than the prior's measured (propose)
      -> validation: the prior, the proposal and the best proxy on validation seeds the proxies did not use
      -> the best measured of them (choice) -> blend.yaml and the reports (report)

The output directory is held by one search at a time (a lock file); proxies live in ``OUT/proxies/<key>/``
and are reused by any later search that needs the same job (a rerun, more proxies, another objective, another
search's validation).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bloomdata import durable
from bloomdata.blend.spec import BlendSpec
from bloomdata.blend.tune import blend_rows
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomtrain.config import TrainConfig
from bloomtrain.mixture_search import choice as choices
from bloomtrain.mixture_search.config import MixtureSearchConfig
from bloomtrain.mixture_search.fit import Fitted, choose, fit_all
from bloomtrain.mixture_search.plan import (
    check_datasets,
    input_fingerprints,
    proxy_job,
    proxy_train_config,
    vocab_size,
    write_valid_sets,
)
from bloomtrain.mixture_search.propose import Candidate, propose
from bloomtrain.mixture_search.proxy import ProxyResult, write_job
from bloomtrain.mixture_search.report import write_search
from bloomtrain.mixture_search.result import (
    Choice,
    DatasetEntry,
    Measured,
    Prediction,
    Proposal,
    ProxyEntry,
    SearchResult,
    Validation,
)
from bloomtrain.mixture_search.runner import ProxyTrainer, run_proxies
from bloomtrain.mixture_search.space import SearchSpace, candidate_mixtures, proxy_mixtures, search_space

LOCK = ".search.lock"
OnProxy = Callable[[int, int, ProxyEntry], None]  # finished so far, total, the proxy


@dataclass(frozen=True)
class Search:
    """What every step of one search shares."""

    config: MixtureSearchConfig
    space: SearchSpace
    train: TrainConfig  # the proxies' training config (seed and blend set per job)
    inputs: dict[str, str]  # fingerprints of what the proxies read
    objective: np.ndarray  # [d]: each dataset's share of the objective, sum 1
    proxies_dir: Path

    @property
    def scale(self) -> np.ndarray:
        """[d] the proxies' epochs per unit of weight: the tokens each proxy trains on over each dataset's."""
        schedule = self.train.schedule
        tokens = (schedule.train_iters or 0) * schedule.global_batch_size * self.train.model.seq_length
        return self.space.epochs(np.ones(len(self.space.names)), tokens)


def objective_weights(space: SearchSpace, config: MixtureSearchConfig) -> np.ndarray:
    """[d] weights of the datasets' bits per byte in the objective (sum 1)."""
    unknown = sorted(set(config.objective_weights) - set(space.names))
    if unknown:
        raise BloomstackError(f"objective_weights: no dataset {', '.join(unknown)} (datasets: "
                              f"{', '.join(space.names)})", keys=["objective_weights"])
    raw = np.array([config.objective_weights.get(n, 1.0) for n in space.names])
    if raw.sum() <= 0:
        raise BloomstackError("objective_weights: every dataset weighs 0; give at least one a positive weight",
                              keys=["objective_weights"])
    return raw / raw.sum()


def prepare(config: MixtureSearchConfig, out: Path) -> Search:
    """The space, the proxies' training config and the validation sets; every input checked first."""
    space = search_space(config)
    seq = config.proxy_recipe().model.seq_length
    check_datasets(space, config, seq)
    valid_sets = write_valid_sets(space, config, seq, out / "valid")
    train = proxy_train_config(config, vocab_size(config.tokenizer), valid_sets, out / "cache")
    return Search(config, space, train, input_fingerprints(space, config.tokenizer),
                  objective_weights(space, config), out / "proxies")


def _progress(total: int, config: MixtureSearchConfig, on_proxy: OnProxy | None, what: str):
    """The callback counting finished proxies: a tqdm bar (``config.progress``) and ``on_proxy``."""
    bar = None
    if config.progress:
        from tqdm import tqdm  # noqa: PLC0415

        bar = tqdm(total=total, desc=what, unit="proxy", file=sys.stderr)
    count = [0]

    def report(entry: ProxyEntry) -> None:
        count[0] += 1
        if bar is not None:
            bar.set_postfix_str(f"{entry.name} {entry.objective:.4f}")
            bar.update(1)
            if count[0] == total:
                bar.close()
        if on_proxy is not None:
            on_proxy(count[0], total, entry)

    return report


def train_mixtures(search: Search, mixtures: np.ndarray, seeds: list[int], names: list[str],
                   trainer: ProxyTrainer | None, report: Callable[[ProxyEntry], None]) -> list[ProxyEntry]:
    """One proxy per row of ``mixtures`` (with its seed and name), trained unless finished; in order."""
    jobs = [proxy_job(search.space, search.config, search.train, search.inputs, w, s) for w, s in zip(mixtures, seeds)]
    dirs = [write_job(search.proxies_dir, job) for job in jobs]

    def entry(i: int, result: ProxyResult) -> ProxyEntry:
        return ProxyEntry(name=names[i], key=jobs[i].key, weights=result.weights, bpb=result.bpb,
                          objective=float(search.space.vector(result.bpb) @ search.objective), seconds=result.seconds)

    results = run_proxies(dirs, search.config, trainer, lambda i, r: report(entry(i, r)))
    return [entry(i, r) for i, r in enumerate(results)]


def proposal(search: Search, fitted: Fitted, tried: np.ndarray, prior: ProxyEntry) -> tuple[Candidate, Proposal]:
    """The fit's best mixture within the bounds (``propose``), among the search's candidates and ``tried``."""
    c, space = search.config, search.space
    candidates = np.vstack([tried, candidate_mixtures(space, c.candidates, c.seed, c.concentration)])
    best = propose(fitted, candidates, search.objective, space.lo, space.hi, c.top_k)
    return best, Proposal(weights=space.weights(best.weights), regressor=fitted.name,
                          predicted=Prediction(objective=best.objective, bpb=space.weights(best.bpb)),
                          epochs=space.weights(space.epochs(best.weights)),
                          better_than_prior=best.better_than(prior.objective))


def _measured(name: str, entries: list[ProxyEntry], names: list[str]) -> Measured:
    objectives = [e.objective for e in entries]
    bpb = {n: float(np.mean([e.bpb[n] for e in entries])) for n in names}
    return Measured(name=name, weights=entries[0].weights, objective=float(np.mean(objectives)), bpb=bpb,
                    objectives=objectives, spread=float(np.ptp(objectives)))


def best_proxy(proxies: list[ProxyEntry]) -> ProxyEntry | None:
    """The proxy with the lowest objective on the search's seed, if it is not the prior and beats it."""
    best = min(proxies[1:], key=lambda p: p.objective, default=None)
    return best if best is not None and best.objective < proxies[0].objective else None


def validate(search: Search, finalists: dict[str, np.ndarray], trainer: ProxyTrainer | None,
             on_proxy: OnProxy | None) -> Validation:
    """Each finalist (name -> weights [d]: prior, proposal, maybe a proxy) trained with seeds ``seed + 1, seed +
    2, ...``, the same tokens. Not the search's own seed: the best proxy was picked for its measurement on that
    seed, so the same run would favour it by the very luck that picked it (the lowest of K noisy numbers)."""
    seeds = [search.config.seed + 1 + i for i in range(search.config.validate_seeds)]
    mixtures = np.vstack([np.tile(w, (len(seeds), 1)) for w in finalists.values()])
    names = [f"validate-{what}-seed{s}" for what in finalists for s in seeds]
    report = _progress(len(names), search.config, on_proxy, "validation proxies")
    entries = train_mixtures(search, mixtures, seeds * len(finalists), names, trainer, report)
    measured = {what: _measured(what, entries[i * len(seeds):(i + 1) * len(seeds)], search.space.names)
                for i, what in enumerate(finalists)}
    prior, proposed = measured.pop("prior"), measured.pop("proposal")
    spread = max(prior.spread, proposed.spread)
    improvement = prior.objective - proposed.objective
    return Validation(seeds=seeds, prior=prior, proposal=proposed, proxy=next(iter(measured.values()), None),
                      improvement=improvement, spread=spread, tie=abs(improvement) < spread)


def chosen_blend(search: Search, weights: np.ndarray) -> BlendSpec:
    """The chosen mixture as a blend for ``bloomtrain train``: the search's split, tokens drawn at the budget."""
    c, space = search.config, search.space
    rows = blend_rows(space.prefixes, space.weights(weights), space.tokens, c.token_budget)
    return BlendSpec(token_budget=c.token_budget, split=c.split, train_range=c.train_range,
                     valid_range=c.valid_range, mixture=c.prior_mixture, datasets=rows)


def _datasets(space: SearchSpace) -> list[DatasetEntry]:
    return [DatasetEntry(name=n, prefix=space.prefixes[n], tokens=space.tokens[n], prior=float(p), lo=float(lo),
                         hi=float(hi), prior_epochs=float(e))
            for n, p, lo, hi, e in zip(space.names, space.prior, space.lo, space.hi, space.epochs(space.prior))]


def decide(search: Search, proxies: list[ProxyEntry], best: Candidate, fitted: Fitted, trainer: ProxyTrainer | None,
           on_proxy: OnProxy | None) -> tuple[Validation | None, Choice]:
    """Validation where the gate opens and ``validate_proposal`` asks, then what blend.yaml holds (``choice``)."""
    space, config, prior = search.space, search.config, proxies[0]
    if not best.better_than(prior.objective):
        return None, choices.gate_closed(space, prior, best.objective, fitted.name, config.proxies)
    contender = best_proxy(proxies)
    if not config.validate_proposal:
        proposed = choices.Finalist("proposal", "proposal", space.weights(best.weights), best.objective, False)
        return None, choices.unvalidated(space, prior, contender, proposed, config.proxies)
    finalists = {"prior": space.prior, "proposal": best.weights}
    if contender is not None:
        finalists[contender.name] = space.vector(contender.weights)
    validation = validate(search, finalists, trainer, on_proxy)
    return validation, choices.validated(space, validation, config.proxies)


def run_search(config: MixtureSearchConfig, *, trainer: ProxyTrainer | None = None,
               on_proxy: OnProxy | None = None) -> SearchResult:
    """Search (see the module docstring); writes OUT's files and returns ``search.json``'s content.

    ``trainer`` replaces ``proxy.run_proxy`` (a proxy directory -> its result; tests use stubs);
    ``on_proxy(done, total, proxy)`` is called as proxies finish (the flow logs them)."""
    out = Path(config.out_dir).resolve()
    config = derive(config, out_dir=str(out))
    with durable.owned_directory(out, LOCK, "mixture search"):
        search = prepare(config, out)
        space, seconds = search.space, {}
        start = time.perf_counter()
        mixtures = proxy_mixtures(space, config.proxies, config.seed)
        names = ["prior", *(f"p{i:02d}" for i in range(1, config.proxies))]
        proxies = train_mixtures(search, mixtures, [config.seed] * len(names), names, trainer,
                                 _progress(len(names), config, on_proxy, "proxies"))
        seconds["proxies"] = time.perf_counter() - start
        start = time.perf_counter()
        measured = np.array([space.vector(p.bpb) for p in proxies])
        fits = fit_all(mixtures, measured, search.scale, search.objective, config.seed)
        chosen = choose(fits, config.regressor)
        best, proposed = proposal(search, chosen, mixtures, proxies[0])
        seconds["fit"] = time.perf_counter() - start
        start = time.perf_counter()
        validation, choice = decide(search, proxies, best, chosen, trainer, on_proxy)
        seconds["validation"] = time.perf_counter() - start
        result = SearchResult(out_dir=str(out), blend_yaml=str(out / "blend.yaml"), prior_source=space.prior_source,
                              token_budget=config.token_budget, epochs_budget=space.budget, datasets=_datasets(space),
                              objective_weights=space.weights(search.objective), proxies=proxies,
                              fit={name: f.held_out for name, f in fits.items()}, selected=chosen.name,
                              proposal=proposed, validation=validation, choice=choice, seconds=seconds)
        write_search(result, chosen_blend(search, space.vector(choice.weights)), config.max_epochs)
        return result
