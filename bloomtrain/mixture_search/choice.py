"""Which mixture ``blend.yaml`` holds, and the one sentence that says why (``Choice``).

The rule: the best *measured* mixture, never a prediction over a measurement.

- The proposal is not predicted better than the prior's measured objective (``propose``'s gate): the prior,
  nothing validated.
- Validated (the default): the lowest objective averaged over the validation seeds among the prior, the
  proposal and the best proxy (the one proxy that measured better than the prior on the search's seed), all
  trained on the same seeds, none of them the search's own (``run.validate``). A winner whose margin over the prior is
  less than the seed spread (the larger max - min over seeds of the two) is written, and reported as a tie.
- ``--no-validate``: the lowest objective known, the prior's and the best proxy's measured on the search's
  seed, the proposal's predicted (flagged as not measured).

Where blend.yaml is not the proposal, the sentence gives the figures and the next step: more proxies, wider
bounds, or more validation seeds for a tie.
"""

from __future__ import annotations

from dataclasses import dataclass

from bloomtrain.mixture_search.result import Choice, Measured, ProxyEntry, Validation
from bloomtrain.mixture_search.space import SearchSpace


@dataclass(frozen=True)
class Finalist:
    """A mixture blend.yaml may hold, with its objective as known."""

    source: str  # proposal | prior | proxy
    name: str
    weights: dict[str, float]
    objective: float
    measured: bool = True


def next_step(proxies: int) -> str:
    return f"next: more proxies (--proxies {2 * proxies}) or wider bounds (--cap, --max-epochs, --budget)"


def _seeds(seeds: list[int]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(str(s) for s in seeds)}"


def _choice(space: SearchSpace, best: Finalist, prior: float, reason: str, tie: bool = False) -> Choice:
    vector = space.vector(best.weights)
    return Choice(source=best.source, name=best.name, weights=best.weights, epochs=space.weights(space.epochs(vector)),
                  objective=best.objective, measured=best.measured, prior_objective=prior, tie=tie, reason=reason)


def gate_closed(space: SearchSpace, prior: ProxyEntry, predicted: float, regressor: str, proxies: int) -> Choice:
    """No candidate predicted better than the prior: keep it, validate nothing."""
    reason = (f"blend.yaml keeps the prior ({prior.objective:.4f} bits per byte, measured): no candidate mixture is "
              f"predicted better by the {regressor} fit (its best: {predicted:.4f}), so nothing was validated; "
              f"{next_step(proxies)}.")
    return _choice(space, Finalist("prior", "prior", prior.weights, prior.objective), prior.objective, reason)


def _finalist(m: Measured, source: str) -> Finalist:
    return Finalist(source, m.name, m.weights, m.objective)


def validated(space: SearchSpace, v: Validation, proxies: int) -> Choice:
    """The lowest mean objective over the validation seeds among the prior, the proposal and the best proxy."""
    finalists = [_finalist(v.prior, "prior"), _finalist(v.proposal, "proposal")]
    if v.proxy is not None:
        finalists.append(_finalist(v.proxy, "proxy"))
    best = min(finalists, key=lambda f: f.objective)  # first of equals: the prior
    measured = {"prior": v.prior, "proposal": v.proposal, "proxy": v.proxy}
    spread = max(v.prior.spread, measured[best.source].spread)  # type: ignore[union-attr]
    margin = v.prior.objective - best.objective
    seeds = _seeds(v.seeds)
    if best.source == "prior":
        others = f"the proposal measured {v.proposal.objective:.4f} ({-v.improvement:+.4f})"
        if v.proxy is not None:
            others += f" and the best proxy {v.proxy.name} {v.proxy.objective:.4f}"
        reason = (f"blend.yaml keeps the prior ({v.prior.objective:.4f} bits per byte, mean over {seeds}): "
                  f"{others}; {next_step(proxies)}.")
        return _choice(space, best, v.prior.objective, reason)
    tie = margin < spread
    what = "the proposal" if best.source == "proposal" else f"proxy {best.name}'s mixture"
    versus = "" if best.source == "proposal" else f" and the proposal's {v.proposal.objective:.4f}"
    figures = (f"{best.objective:.4f} bits per byte against the prior's {v.prior.objective:.4f}{versus} (mean over "
               f"{seeds}), better than the prior by {margin:.4f}")
    if tie:
        reason = (f"blend.yaml holds {what}, but it is a tie: {figures}, less than the seed spread {spread:.4f}; "
                  f"for a clear answer validate with more seeds (--validate-seeds {2 * len(v.seeds)}).")
    elif best.source == "proposal":
        reason = (f"blend.yaml holds the proposal: {figures}, "
                  f"{margin / max(spread, 1e-12):.1f}x the seed spread {spread:.4f}.")
    else:
        reason = (f"blend.yaml holds {what}, measured best: {figures} (seed spread {spread:.4f}); the proposal did "
                  f"not beat it; {next_step(proxies)}.")
    return _choice(space, best, v.prior.objective, reason, tie)


def unvalidated(space: SearchSpace, prior: ProxyEntry, best_proxy: ProxyEntry | None, proposal: Finalist,
                proxies: int) -> Choice:
    """``--no-validate``: the lowest objective known, measurements on the search's seed or the prediction."""
    finalists = [Finalist("prior", "prior", prior.weights, prior.objective), proposal]
    if best_proxy is not None:
        finalists.append(Finalist("proxy", best_proxy.name, best_proxy.weights, best_proxy.objective))
    best = min(finalists, key=lambda f: f.objective)
    if best.source == "proposal":
        reason = (f"blend.yaml holds the proposal, predicted {best.objective:.4f} bits per byte against the prior's "
                  f"measured {prior.objective:.4f}, and not validated (--no-validate): check it with --validate.")
    else:
        what = "keeps the prior" if best.source == "prior" else f"holds proxy {best.name}'s mixture"
        reason = (f"blend.yaml {what} ({best.objective:.4f} bits per byte, measured on one seed, not validated): "
                  f"the proposal is predicted {proposal.objective:.4f}; {next_step(proxies)}.")
    return _choice(space, best, prior.objective, reason)
