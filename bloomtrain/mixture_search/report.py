"""The search's files: the chosen mixture as a blend (``blend.yaml`` + ``bloomdata blend``'s blend.md/json/png), and
``search.json`` (``SearchResult``), ``search.md`` (tables) and ``search.png`` (charts).

Written through ``bloomdata.durable``, search.json last: it is the search's own completion record (it names
blend.yaml, written first by ``bloomdata.blend.report.write_blend``).
"""

from __future__ import annotations

import io
from pathlib import Path

from bloomdata import durable
from bloomdata.blend.report import write_blend
from bloomdata.blend.spec import BlendSpec
from bloomtrain.mixture_search.result import SearchResult

SEARCH_JSON, SEARCH_MD, SEARCH_PNG = "search.json", "search.md", "search.png"


def _f(value: float | None, spec: str = ".4f") -> str:
    return "-" if value is None else format(value, spec)


def _objective_line(result: SearchResult) -> str:
    shares = set(round(w, 12) for w in result.objective_weights.values())
    if len(shares) == 1:
        return f"the mean of the {len(result.datasets)} datasets' validation bits per byte"
    return "a weighted mean of the validation bits per byte (" + ", ".join(
        f"{n} {w:.3f}" for n, w in result.objective_weights.items()) + ")"


def _weight(w: float, epochs: float) -> str:
    return f"{w:.4f} ({epochs:.2f})"


def _proposal_table(result: SearchResult) -> list[str]:
    prior_proxy, p, c = result.proxies[0], result.proposal, result.choice
    lines = [f"Weights with, in brackets, each dataset's epochs at {result.epochs_budget:,} tokens "
             f"({'the budget' if result.token_budget else 'the proxies: no --budget'}); bounds include at most "
             "max epochs.", "",
             "| dataset | tokens | bounds | prior | proposal | blend.yaml | prior bpb (measured) | "
             "proposal bpb (predicted) |", "|---|---:|---|---:|---:|---:|---:|---:|"]
    for d in result.datasets:
        lines.append(f"| {d.name} | {d.tokens:,} | [{d.lo:.3g}, {d.hi:.3g}] | {_weight(d.prior, d.prior_epochs)} | "
                     f"{_weight(p.weights[d.name], p.epochs[d.name])} | {_weight(c.weights[d.name], c.epochs[d.name])} "
                     f"| {prior_proxy.bpb[d.name]:.4f} | {p.predicted.bpb[d.name]:.4f} |")
    lines.append(f"| **objective** | | | | | | {prior_proxy.objective:.4f} | {p.predicted.objective:.4f} |")
    return lines


def _validation_table(result: SearchResult) -> list[str]:
    v = result.validation
    if v is None:
        why = ("the proposal is not predicted better than the prior" if not result.proposal.better_than_prior
               else "--no-validate")
        return [f"Not validated ({why})."]
    seeds = ", ".join(str(s) for s in v.seeds)
    lines = [f"Proxies trained on each finalist with the same tokens and seeds ({seeds}); mean over seeds:", "",
             "| | objective | per seed | spread |" + "".join(f" {d.name} |" for d in result.datasets),
             "|---|---:|---|---:|" + "---:|" * len(result.datasets)]
    rows = [("prior", v.prior), ("proposal", v.proposal)]
    if v.proxy is not None:
        rows.append((f"best proxy ({v.proxy.name})", v.proxy))
    for label, m in rows:
        per_seed = ", ".join(f"{o:.4f}" for o in m.objectives)
        lines.append(f"| {label} | {m.objective:.4f} | {per_seed} | {m.spread:.4f} |"
                     + "".join(f" {m.bpb[d.name]:.4f} |" for d in result.datasets))
    verdict = "a tie with" if v.tie else ("better" if v.improvement > 0 else "worse") + " than"
    lines += ["", f"The proposal is {verdict} the prior: {v.improvement:+.4f} bits per byte (prior minus proposal; "
                  f"the seed spread is {v.spread:.4f})."]
    return lines


def search_markdown(result: SearchResult) -> str:
    n = len(result.proxies)
    lines = [f"# Mixture search: {n} proxies around the prior ({result.prior_source})", "",
             f"Objective: {_objective_line(result)} (lower is better). The blend is `{result.blend_yaml}` "
             f"(`bloomtrain train ... data.kind=blend data.blend={result.blend_yaml}`).", "",
             f"**{result.choice.reason}**", "",
             "## Proposal", "", *_proposal_table(result), "",
             f"## Fit (each proxy predicted by a fit without it; {n} proxies)", "",
             "| regressor | Spearman | MAE (bits per byte) | picked the proposal |", "|---|---:|---:|---|"]
    lines += [f"| {name} | {s.spearman:.3f} | {s.mae:.4f} | {'yes' if name == result.selected else ''} |"
              for name, s in result.fit.items()]
    lines += ["", "## Validation", "", *_validation_table(result), "", "## Proxies", "",
              "| proxy | objective | seconds |" + "".join(f" {d.name} |" for d in result.datasets),
              "|---|---:|---:|" + "---:|" * len(result.datasets)]
    lines += [f"| {p.name} | {p.objective:.4f} | {p.seconds:.0f} |" + "".join(
        f" {p.weights[d.name]:.3f} |" for d in result.datasets) for p in result.proxies]
    lines += ["", "Proxy columns are weights; each proxy's bits per byte are in search.json."]
    return "\n".join(lines) + "\n"


def search_png(result: SearchResult) -> bytes:
    """Predicted vs measured held-out objective per regressor (left); the prior's, the proposal's and
    blend.yaml's weights; with a validation, the finalists' measured bits per byte (right)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = [d.name for d in result.datasets]
    panels = 3 if result.validation is not None else 2
    fig, axes = plt.subplots(1, panels, figsize=(5.0 * panels, 4.5))
    ax = axes[0]
    for name, s in result.fit.items():
        ax.scatter(s.measured, s.predicted, label=f"{name} (Spearman {s.spearman:.2f}, MAE {s.mae:.3f})", s=18)
    values = [v for s in result.fit.values() for v in (*s.measured, *s.predicted)]
    ax.plot([min(values), max(values)], [min(values), max(values)], color="grey", linewidth=0.8)
    ax.set(xlabel="measured objective (bits per byte)", ylabel="predicted, held out", title="fit on held-out proxies")
    ax.legend(fontsize=8)
    _bars(axes[1], names, [("prior", {d.name: d.prior for d in result.datasets}),
                           ("proposal", result.proposal.weights), (f"blend.yaml ({result.choice.name})",
                                                                   result.choice.weights)])
    axes[1].set(ylabel="weight", title="mixture")
    if result.validation is not None:
        v = result.validation
        finalists = [m for m in (v.prior, v.proposal, v.proxy) if m is not None]
        _bars(axes[2], names, [(f"{m.name} {m.objective:.3f}", m.bpb) for m in finalists])
        axes[2].set(ylabel="validation bits per byte", title="validated (mean over seeds)")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def _bars(ax, names: list[str], series: list[tuple[str, dict[str, float]]]) -> None:
    """Grouped bars: one group per dataset, one bar per series."""
    width = 0.8 / len(series)
    for k, (label, values) in enumerate(series):
        ax.bar([i + (k - (len(series) - 1) / 2) * width for i in range(len(names))], [values[n] for n in names],
               width, label=label)
    ax.set_xticks(list(range(len(names))), names, rotation=60, ha="right")
    ax.legend(fontsize=8)


def write_search(result: SearchResult, blend: BlendSpec, max_epochs: float) -> dict[str, Path]:
    """blend.yaml (and its blend.md/json/png), search.md, search.png, then search.json; returns the paths."""
    out = Path(result.out_dir)
    paths = write_blend(blend, out, max_epochs)
    paths = {f"blend_{k}": v for k, v in paths.items()}
    for name, content in ((SEARCH_MD, search_markdown(result).encode()), (SEARCH_PNG, search_png(result))):
        durable.write_bytes(out / name, content)
        paths[name] = out / name
    durable.write_json(out / SEARCH_JSON, result, indent=2)
    paths[SEARCH_JSON] = out / SEARCH_JSON
    return paths
