"""Stage bookkeeping: a stage is skipped when its outputs exist and were made from the same config.

Each stage writes a marker ``<out_dir>/_stage.json`` *last*, after all its outputs, atomically (tmp file +
``os.replace``), holding the stage's config hash, its output paths and a small summary. A stage is done
when that marker exists, its hash equals the hash of the config we would run now, and every output it
lists still exists. So:

- re-running a finished pipeline does nothing (every marker matches);
- re-running a failed one resumes at the failed stage (earlier markers match; the failed stage wrote none);
- editing a stage's config re-runs it *and every stage after it*, because a stage's hash folds in the
  hashes of the stages it consumes (``upstream``).

The trade-off: the hash covers configs and upstream hashes, not input bytes. A corpus edited in place under
the same path is not noticed; pass ``inputs`` (paths) to fold in their sizes and mtimes where that matters.
This module is Prefect-free; the flows log "skipped" and reuse ``summary`` for their artifacts.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

MARKER = "_stage.json"


def _canonical(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return value


def _fingerprint(path: Path) -> list:
    """(relative name, size, mtime_ns) of a file, or of every file under a directory."""
    if path.is_dir():
        return [[str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns]
                for p in sorted(path.rglob("*")) if p.is_file()]
    if path.exists():
        return [[path.name, path.stat().st_size, path.stat().st_mtime_ns]]
    return [[path.name, None, None]]


def config_hash(config: Any, *, upstream: Iterable[str] = (), inputs: Iterable[str | Path] = ()) -> str:
    """A short, stable hash of a stage's config, the hashes of the stages it reads, and its input files."""
    payload = {
        "config": _canonical(config),
        "upstream": list(upstream),
        "inputs": {str(p): _fingerprint(Path(p)) for p in inputs},
    }
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def read_marker(out_dir: str | Path) -> dict | None:
    path = Path(out_dir) / MARKER
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def completed(out_dir: str | Path, digest: str) -> dict | None:
    """The marker of a finished stage whose hash is ``digest`` and whose outputs all exist; else None."""
    marker = read_marker(out_dir)
    if marker is None or marker.get("hash") != digest:
        return None
    if not all(Path(p).exists() for p in marker.get("outputs", {}).values()):
        return None
    return marker


def write_marker(out_dir: str | Path, *, stage: str, digest: str, outputs: dict[str, str | Path],
                 summary: dict | None = None, config: Any = None) -> dict:
    """Record a finished stage. Call it after every output is in place: the marker is the commit point."""
    out = Path(out_dir)
    missing = [f"{k}={v}" for k, v in outputs.items() if not Path(v).exists()]
    if missing:
        raise FileNotFoundError(f"stage {stage}: outputs missing, refusing to mark it done: {', '.join(missing)}")
    marker = {
        "stage": stage,
        "hash": digest,
        "outputs": {k: str(v) for k, v in outputs.items()},
        "summary": _canonical(summary or {}),
        "config": _canonical(config),
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{MARKER}.tmp"
    tmp.write_text(json.dumps(marker, indent=2, sort_keys=True))
    os.replace(tmp, out / MARKER)
    return marker


def invalidate(out_dir: str | Path) -> None:
    """Forget a stage (its outputs stay; the next run rewrites them)."""
    (Path(out_dir) / MARKER).unlink(missing_ok=True)
