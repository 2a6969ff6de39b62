"""Markdown pieces every section of a model card uses: the one-line note for what is not recorded, tables and
number formats (those of ``python -m flows.demo``: losses to 4 decimals, perplexities to 2, tokens/s without
decimals, so the card and the demo agree digit for digit)."""

from __future__ import annotations

from collections.abc import Sequence


def note(what: str, why: str) -> str:
    """The one line that stands where an unknown section or field would be: what is missing, why, and how to add
    it."""
    return f"*Not recorded: {what}; {why}.*"


def table(header: Sequence[str], rows: Sequence[Sequence[object]], numeric_from: int = 1) -> str:
    """A Markdown table; columns from ``numeric_from`` on are right-aligned, and a column no row filled (every cell
    '-', unknown) is left out."""
    keep = [i for i in range(len(header)) if not rows or any(str(row[i]) != "-" for row in rows)]
    rule = ["---" if i < numeric_from else "---:" for i in keep]
    lines = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(str(row[i]) for i in keep) + " |" for row in rows]
    return "\n".join(lines)


def pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)

