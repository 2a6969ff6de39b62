"""The search's files: the proposal as a blend (``blend.yaml`` + ``bloomdata blend``'s blend.md/json/png), and
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


def _proposal_table(result: SearchResult) -> list[str]:
    prior_proxy = result.proxies[0]
    p = result.proposal
    lines = ["| dataset | tokens | prior | proposal | bounds | epochs at budget | prior bpb (measured) | "
             "proposal bpb (predicted) |", "|---|---:|---:|---:|---|---:|---:|---:|"]
    for d in result.datasets:
        epochs = None if p.epochs is None else p.epochs[d.name]
        lines.append(f"| {d.name} | {d.tokens:,} | {d.prior:.4f} | {p.weights[d.name]:.4f} | [{d.lo:.3g}, {d.hi:.3g}] "
                     f"| {_f(epochs, '.2f')} | {prior_proxy.bpb[d.name]:.4f} | {p.predicted.bpb[d.name]:.4f} |")
    lines.append(f"| **objective** | | | | | | {prior_proxy.objective:.4f} | {p.predicted.objective:.4f} |")
    return lines


def _validation_table(result: SearchResult) -> list[str]:
    v = result.validation
    if v is None:
        return ["Not validated (add --validate to train proxies on the proposal and the prior)."]
    seeds = ", ".join(str(s) for s in v.seeds)
    lines = [f"Proxies trained on both mixtures with the same tokens and seeds ({seeds}); mean over seeds:", "",
             "| | objective | per seed | spread |" + "".join(f" {d.name} |" for d in result.datasets),
             "|---|---:|---|---:|" + "---:|" * len(result.datasets)]
    for label, m in (("prior", v.prior), ("proposal", v.proposal)):
        per_seed = ", ".join(f"{o:.4f}" for o in m.objectives)
        lines.append(f"| {label} | {m.objective:.4f} | {per_seed} | {m.spread:.4f} |"
                     + "".join(f" {m.bpb[d.name]:.4f} |" for d in result.datasets))
    verdict = "better" if v.improvement > 0 else "not better"
    lines += ["", f"The proposal is {verdict} than the prior by {v.improvement:+.4f} bits per byte (prior minus "
                  f"proposal; the prior's seed spread is {v.prior.spread:.4f})."]
    return lines


def search_markdown(result: SearchResult) -> str:
    n = len(result.proxies)
    lines = [f"# Mixture search: {n} proxies around the prior ({result.prior_source})", "",
             f"Objective: {_objective_line(result)} (lower is better). The proposal is `{result.blend_yaml}` "
             f"(`bloomtrain train ... data.kind=blend data.blend={result.blend_yaml}`).", "",
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
    """Predicted vs measured held-out objective per regressor (left); prior vs proposed weights, and with a
    validation the measured bits per byte of both (right)."""
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
    x = range(len(names))
    axes[1].bar([i - 0.2 for i in x], [d.prior for d in result.datasets], 0.4, label="prior")
    axes[1].bar([i + 0.2 for i in x], [result.proposal.weights[n] for n in names], 0.4, label="proposal")
    axes[1].set_xticks(list(x), names, rotation=60, ha="right")
    axes[1].set(ylabel="weight", title="mixture")
    axes[1].legend()
    if result.validation is not None:
        v = result.validation
        axes[2].bar([i - 0.2 for i in x], [v.prior.bpb[n] for n in names], 0.4, label=f"prior {v.prior.objective:.3f}")
        axes[2].bar([i + 0.2 for i in x], [v.proposal.bpb[n] for n in names], 0.4,
                    label=f"proposal {v.proposal.objective:.3f}")
        axes[2].set_xticks(list(x), names, rotation=60, ha="right")
        axes[2].set(ylabel="validation bits per byte", title="validated (mean over seeds)")
        axes[2].legend()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


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
