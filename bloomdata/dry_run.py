"""``--dry-run``: what a command would do, with nothing written, as a typed plan printed as text or JSON.

Each command's plan is a pydantic model built by the library from the same planning its run does (the build's and
clean's shard plan, the tokenizer trainer's quotas, the trainer's layout), so the plan and the run cannot drift
apart. A size the run alone knows is an estimate; the field that holds it says how it is estimated. The text form
is the plan's fields, one a line, nested by indentation; a field named ``*bytes`` shows its human size beside it.
``--json`` prints ``model_dump(mode="json")`` instead (the same keys).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from bloomdata.readers import Document, Shard, input_bytes, read_shard

SAMPLE_CHARS = 1 << 18  # characters of documents a size estimate reads from each sampled file
SAMPLE_FILES = 64  # files sampled; the others are taken to be like them


class PlannedFile(BaseModel):
    """One file a command reads or would write."""

    path: str
    bytes: int | None = Field(default=None, description="its size: exact for an input, an estimate for an output "
                                                        "(None: not estimated)")
    lang: str | None = None


class Inputs(BaseModel):
    """The files a command reads, in plan order, and their total size."""

    files: list[PlannedFile]
    total_bytes: int


def inputs_of(shards: Iterable[Shard]) -> Inputs:
    """The distinct files of ``shards`` (in plan order) with their sizes and languages (None: from the rows)."""
    seen: dict[str, PlannedFile] = {}
    for shard in shards:
        if shard.path not in seen:
            seen[shard.path] = PlannedFile(path=shard.path, bytes=input_bytes(shard.path), lang=shard.lang)
    files = list(seen.values())
    return Inputs(files=files, total_bytes=sum(f.bytes or 0 for f in files))


def sample_documents(shard: Shard, max_chars: int = SAMPLE_CHARS) -> tuple[list[Document], bool]:
    """The first documents of ``shard``'s whole file, up to ``max_chars`` characters; and whether that is all of
    them (the file was read to its end)."""
    whole = dataclasses.replace(shard, start=0, stop=None, offset=None, byte_range=None)
    docs: list[Document] = []
    chars = 0
    for item in read_shard(whole):
        if not isinstance(item, Document):
            continue
        if chars >= max_chars:
            return docs, False
        docs.append(item)
        chars += len(item.text)
    return docs, True


def scale_to_file(shard: Shard, docs: list[Document], complete: bool) -> float:
    """What a count over ``docs`` is multiplied by for the whole file: 1 when they are all of it, else the file's
    bytes over the UTF-8 bytes of their text (so a compressed file is under-estimated by its compression ratio,
    JSON lines over-estimated by their JSON overhead)."""
    text_bytes = sum(len(d.text.encode()) for d in docs)
    return 1.0 if complete or not text_bytes else input_bytes(shard.path) / text_bytes


def where_text(workers: int, scheduler: str | None) -> str:
    """Where a job's steps would run, in words (as ``bloomdata.jobs.placement.Placement`` decides)."""
    if scheduler:
        return f"the Dask scheduler at {scheduler}"
    return f"a local Dask cluster of {workers} worker processes" if workers else "this process"


def human_bytes(n: float) -> str:
    """``1234567`` -> ``1.2 MB`` (decimal units, as ``bloomdata.units`` reads them)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"  # not reached


def _lines(value: Any, key: str, indent: int, unit: str = "") -> list[str]:
    """``value`` under ``key`` as indented lines; ``unit``: the key whose name says the unit (a dict's entries
    under ``text_bytes`` are bytes too)."""
    pad, unit = "  " * indent, unit or key
    if isinstance(value, dict):
        head = [f"{pad}{key}:"] if key else []
        inner = unit if unit.endswith("bytes") else ""
        return head + [line for k, v in value.items() for line in _lines(v, str(k), indent + bool(key), inner)]
    if isinstance(value, list) and value and isinstance(value[0], dict):
        out = [f"{pad}{key}:"]
        for item in value:
            fields = [f"{k} {_scalar(v, k)}" for k, v in item.items() if v is not None]
            out.append(f"{pad}  - " + ", ".join(fields))
        return out
    return [f"{pad}{key}: {_scalar(value, unit)}"]


def _scalar(value: Any, key: str) -> str:
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "-"}[value]
    if isinstance(value, int) and key.endswith("bytes"):
        return f"{value:,} ({human_bytes(value)})"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "-"
    return str(value)


def format_plan(command: str, plan: BaseModel) -> str:
    """The plan as text: a title line, then every field, one a line."""
    return "\n".join([f"{command} --dry-run: the plan; nothing was written", *_lines(plan.model_dump(mode="json"),
                                                                                      "", 0)])


def print_plan(command: str, plan: BaseModel, as_json: bool) -> None:
    """Print the plan as text, or as JSON with ``as_json``."""
    print(json.dumps(plan.model_dump(mode="json"), indent=1) if as_json else format_plan(command, plan))
