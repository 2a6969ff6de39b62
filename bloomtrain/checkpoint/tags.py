"""``latest``, ``latest_universal`` and the ``global_stepN`` directories: their one writer, and pruning.

``latest`` names the newest *complete* checkpoint, so it moves last: ``commit_tag`` is its only writer,
called by ``Checkpointer.save`` on rank 0 once every rank's files are on disk, and by the offline import
once it wrote every file. It goes through bloomdata.durable (temporary file, fsync, rename over, directory
fsync): a crash leaves the previous tag or the new one, never a torn or early one. ``latest_universal``
names the newest universal checkpoint folder, as DeepSpeed's ds_to_universal writes it (last, once the
folder is complete); ``commit_universal`` writes it the same durable way for bloomtrain's conversions.

So every ``global_stepN`` newer than the tag ``latest`` names is the unfinished save of a run that stopped (killed,
or its disk full); ``sweep`` removes them, and temporary files of ``latest``, when a run starts.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from bloomdata import durable

LATEST = "latest"
LATEST_UNIVERSAL = "latest_universal"
_STEP_DIR = re.compile(r"global_step(\d+)$")


def tag_for(iteration: int) -> str:
    return f"global_step{iteration}"


def read_latest(ckpt_dir: str | Path, name: str = LATEST) -> str | None:
    """The tag ``latest`` names (``name=LATEST_UNIVERSAL``: the universal folder); None when absent or empty."""
    path = Path(ckpt_dir) / name
    return (path.read_text().strip() or None) if path.is_file() else None


def commit_tag(ckpt_dir: str | Path, tag: str) -> None:
    """Point ``latest`` at ``tag``: call it only when every file of ``tag`` is durably on disk."""
    durable.write_text(Path(ckpt_dir) / LATEST, tag)


def commit_universal(ckpt_dir: str | Path, folder: str) -> None:
    """Point ``latest_universal`` at ``folder``: call it only when the whole converted folder is on disk."""
    durable.write_text(Path(ckpt_dir) / LATEST_UNIVERSAL, folder)


def _steps(ckpt_dir: str | Path) -> list[tuple[int, Path]]:
    """(iteration, directory) of every ``global_stepN`` directory, newest first."""
    return sorted(((int(m.group(1)), p) for p in Path(ckpt_dir).iterdir() if (m := _STEP_DIR.match(p.name)) and
                   p.is_dir()), reverse=True)


def step_tags(ckpt_dir: str | Path) -> list[str]:
    """Every ``global_stepN`` tag of the directory, newest first."""
    return [p.name for _, p in _steps(ckpt_dir)]


def earlier_tags(ckpt_dir: str | Path, tag: str) -> list[str]:
    """The ``global_stepN`` tags older than ``tag``, newest first (where a damaged checkpoint's run falls back)."""
    m = _STEP_DIR.match(tag)
    if m is None:
        return []
    return [p.name for step, p in _steps(ckpt_dir) if step < int(m.group(1))]


def sweep(ckpt_dir: str | Path) -> tuple[list[str], int]:
    """At a run's start (nothing else writes there): remove the ``global_stepN`` directories newer than ``latest``
    (unfinished saves) and temporary files of the directory; returns (removed tags, removed temporary files).
    Without a ``latest`` nothing is removed: the directories may be another tool's."""
    latest = read_latest(ckpt_dir)
    m = _STEP_DIR.match(latest or "")
    removed = []
    if m is not None:
        for step, path in _steps(ckpt_dir):
            if step > int(m.group(1)):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path.name)
    return removed, durable.remove_temps(ckpt_dir)


def prune(ckpt_dir: str | Path, keep_last: int | None, protect: str) -> list[str]:
    """Delete all but the ``keep_last`` newest ``global_stepN`` dirs (never ``protect``); returns removed tags."""
    if keep_last is None:
        return []
    steps = _steps(ckpt_dir)
    removed = []
    for _, path in steps[keep_last:]:
        if path.name != protect:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed
