"""A clean run's report: ``clean.md`` (tables) and ``clean.png`` (where each language's documents and bytes
went), written atomically through ``bloomdata.durable``; ``run_clean`` writes them before the summary, which
vouches for them.
"""

from __future__ import annotations

import io
import os

from bloomdata import durable
from bloomdata.clean.files import REPORT_MD, REPORT_PNG
from bloomdata.clean.summary import CleanSummary


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def markdown(summary: CleanSummary) -> str:
    s = summary
    reasons = s.reasons_seen()
    lines = [f"# Clean report: {s.out_dir}", "",
             f"Settings: **{s.settings_name}**. "
             f"{s.documents_kept:,} of {s.documents_in:,} documents kept ({_pct(s.documents_kept, s.documents_in)}), "
             f"{s.bytes_kept / 1e6:,.2f} of {s.bytes_in / 1e6:,.2f} MB of text; {s.emails_redacted:,} e-mail and "
             f"{s.ips_redacted:,} IP addresses, {s.keys_redacted:,} keys and {s.users_redacted:,} user names redacted. "
             f"Cleaned data: `{s.data_dir}` ({s.output_format}).", ""]
    if s.notes:
        lines += ["Notes:", "", *[f"- {note}" for note in s.notes], ""]
    lines += ["## Removal rate by reason (% of each language's documents)", "",
              "| language | in | removed % | " + " | ".join(reasons) + " |", "|---|" + "---:|" * (len(reasons) + 2)]
    for name, c in s.languages.items():
        cells = [_pct(c.removed.get(r, 0), c.documents_in) if c.removed.get(r) else "" for r in reasons]
        lines.append(f"| {name} | {c.documents_in:,} | {_pct(c.documents_in - c.documents_kept, c.documents_in)} | "
                     + " | ".join(cells) + " |")
    lines += ["", "## Documents per language", "",
              "| language | in | kept | kept % | " + " | ".join(reasons) + " | e-mails | IPs | keys | users |",
              "|---|" + "---:|" * (len(reasons) + 7)]
    for name, c in s.languages.items():
        cells = [f"{c.removed.get(r, 0):,}" for r in reasons]
        lines.append(f"| {name} | {c.documents_in:,} | {c.documents_kept:,} | "
                     f"{_pct(c.documents_kept, c.documents_in)} | "
                     + " | ".join(cells) + f" | {c.emails_redacted:,} | {c.ips_redacted:,} | {c.keys_redacted:,} | "
                     f"{c.users_redacted:,} |")
    lines += ["", "## Bytes per language (UTF-8 text; removed bytes as read)", "",
              "| language | in | kept | kept % | " + " | ".join(reasons) + " |", "|---|" + "---:|" * (len(reasons) + 3)]
    for name, c in s.languages.items():
        cells = [f"{c.removed_bytes.get(r, 0):,}" for r in reasons]
        lines.append(f"| {name} | {c.bytes_in:,} | {c.bytes_kept:,} | {_pct(c.bytes_kept, c.bytes_in)} | "
                     + " | ".join(cells) + " |")
    rejected = {k: v for k, v in s.rejects.items() if v}
    lines += ["", f"Unreadable rows (not counted above): {s.rejects_total:,}"
              + (" (" + ", ".join(f"{k}: {v:,}" for k, v in rejected.items()) + ")" if rejected else "") + ".",
              f"Examples of every reason: `{os.path.basename(s.removed_file)}`.", ""]
    cpu = sum(s.step_seconds.values())
    if cpu:
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in s.stage_seconds.items())
        lines += ["## Time", "", f"Wall {s.wall_seconds:.1f} s ({stages});"
                  f" {s.shards.built} of {s.shards.total} shards filtered in this run, their steps' seconds on every "
                  "worker together:", "", "| step | seconds | share |", "|---|---:|---:|"]
        lines += [f"| {step} | {sec:.2f} | {sec / cpu:.0%} |" for step, sec in s.step_seconds.items()]
        lines.append("")
    return "\n".join(lines)


def chart_png(summary: CleanSummary) -> bytes:
    """Per language, the share of documents (left) and bytes (right) kept and removed by each reason."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary.languages)
    reasons = summary.reasons_seen()
    colors = plt.get_cmap("tab20")
    fig, axes = plt.subplots(1, 2, figsize=(12, max(3.0, 0.32 * len(names) + 2.2)), sharey=True)
    for ax, unit in zip(axes, ("documents", "bytes")):
        left = [0.0] * len(names)
        for i, what in enumerate(["kept", *reasons]):
            shares = []
            for name in names:
                c = summary.languages[name]
                whole = c.documents_in if unit == "documents" else c.bytes_in
                part = (c.documents_kept if unit == "documents" else c.bytes_kept) if what == "kept" else \
                    (c.removed if unit == "documents" else c.removed_bytes).get(what, 0)
                shares.append(100 * part / whole if whole else 0.0)
            ax.barh(names, shares, left=left, color="tab:green" if what == "kept" else colors(i % 20), label=what)
            left = [a + b for a, b in zip(left, shares)]
        ax.set_xlabel(f"% of {unit} in")
        ax.set_xlim(0, 100)
        ax.invert_yaxis()
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8, frameon=False)
    fig.suptitle(f"Clean ({summary.settings_name} settings): {summary.documents_kept:,} of "
                 f"{summary.documents_in:,} documents kept; removal by reason per language")
    fig.tight_layout(rect=(0, 0.04 + 0.025 * (len(labels) // 5), 1, 1))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


def write_report(summary: CleanSummary) -> None:
    durable.write_text(os.path.join(summary.out_dir, REPORT_MD), markdown(summary))
    durable.write_bytes(os.path.join(summary.out_dir, REPORT_PNG), chart_png(summary))
