"""Stage bookkeeping: a stage is skipped when its outputs exist and were made from the same config.

Each stage writes a ``StageMarker`` to ``<out_dir>/_stage.json`` *last*, after all its outputs, with
``bloomdata.durable.write_marker`` (atomic, fsynced), holding the stage's key, its output paths and a small
summary. The key is ``durable.content_key`` of the stage's config, the keys of the stages it consumes and
its input files' sizes and mtimes: the same canonical-JSON sha256 the build's shard markers and the index
cache use. A stage is done when its marker exists, records the key we would run with now, and every output
it lists still exists. So:

- re-running a finished pipeline does nothing (every marker matches);
- re-running a failed one resumes at the failed stage (earlier markers match; the failed stage wrote none);
- editing a stage's config re-runs it *and every stage after it*, because a stage's key folds in the
  keys of the stages it consumes (``upstream``).

The trade-off: the key covers configs and upstream keys, not input bytes. A corpus edited in place under
the same path is not noticed unless its paths are passed as ``inputs`` (their sizes and mtimes are folded
in). This module is Prefect-free; the flows log "skipped" and reuse ``summary`` for their artifacts.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from bloomdata import durable

MARKER = "_stage.json"


class StageMarker(BaseModel):
    """What ``_stage.json`` holds (``key`` first on disk, as every durable marker)."""

    key: str  # config_hash(...) of the run that produced the outputs
    stage: str
    outputs: dict[str, str]  # name -> path; all must exist for the stage to count as done
    summary: dict[str, Any] = {}  # what the flow returned (JSON types), reused when the stage is skipped
    config: Any = None  # the stage's config as JSON, for people reading the marker
    finished_at: str


def _fingerprint(path: Path) -> list:
    """(relative name, size, mtime_ns) of a file, or of every file under a directory."""
    if path.is_dir():
        return [[str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns]
                for p in sorted(path.rglob("*")) if p.is_file()]
    if path.exists():
        return [[path.name, path.stat().st_size, path.stat().st_mtime_ns]]
    return [[path.name, None, None]]


def config_hash(config: Any, *, upstream: Iterable[str] = (), inputs: Iterable[str | Path] = ()) -> str:
    """The stage's key: ``durable.content_key`` of its config, the keys of the stages it reads, and the
    sizes and mtimes of its input files."""
    return durable.content_key({
        "config": config,
        "upstream": list(upstream),
        "inputs": {str(p): _fingerprint(Path(p)) for p in inputs},
    })


def read_marker(out_dir: str | Path) -> StageMarker | None:
    """The stage marker in ``out_dir`` whatever its key; None when missing or unreadable (an older format
    included: the stage then simply runs again)."""
    record = durable.read_json(Path(out_dir) / MARKER)
    try:
        return StageMarker.model_validate(record) if isinstance(record, dict) else None
    except ValidationError:
        return None


def completed(out_dir: str | Path, digest: str) -> StageMarker | None:
    """The marker of a finished stage whose key is ``digest`` and whose outputs all exist; else None."""
    marker = read_marker(out_dir)
    if marker is None or marker.key != digest:
        return None
    if not all(Path(p).exists() for p in marker.outputs.values()):
        return None
    return marker


def write_marker(out_dir: str | Path, *, stage: str, digest: str, outputs: dict[str, str | Path],
                 summary: dict | None = None, config: Any = None) -> StageMarker:
    """Record a finished stage. Call it after every output is in place: the marker is the commit point."""
    out = Path(out_dir)
    missing = [f"{k}={v}" for k, v in outputs.items() if not Path(v).exists()]
    if missing:
        raise FileNotFoundError(f"stage {stage}: outputs missing, refusing to mark it done: {', '.join(missing)}")
    marker = StageMarker(key=digest, stage=stage, outputs={k: str(v) for k, v in outputs.items()},
                         summary=durable.to_jsonable(summary or {}), config=durable.to_jsonable(config),
                         finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    out.mkdir(parents=True, exist_ok=True)
    durable.write_marker(out / MARKER, marker.key, marker.model_dump(mode="json", exclude={"key"}))
    return marker


def invalidate(out_dir: str | Path) -> None:
    """Forget a stage (its outputs stay; the next run rewrites them)."""
    (Path(out_dir) / MARKER).unlink(missing_ok=True)
