"""``latest`` and the ``global_stepN`` directories: the one writer of ``latest``, and pruning.

``latest`` names the newest *complete* checkpoint, so it moves last: ``commit_tag`` is its only writer,
called by ``Checkpointer.save`` on rank 0 once every rank's files are on disk, and by the offline import
once it wrote every file. It goes through bloomdata.durable (temporary file, fsync, rename over, directory
fsync): a crash leaves the previous tag or the new one, never a torn or early one.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from bloomdata import durable

LATEST = "latest"
_STEP_DIR = re.compile(r"global_step(\d+)$")


def tag_for(iteration: int) -> str:
    return f"global_step{iteration}"


def read_latest(ckpt_dir: str | Path) -> str | None:
    path = Path(ckpt_dir) / LATEST
    return path.read_text().strip() if path.is_file() else None


def commit_tag(ckpt_dir: str | Path, tag: str) -> None:
    """Point ``latest`` at ``tag``: call it only when every file of ``tag`` is durably on disk."""
    durable.write_text(Path(ckpt_dir) / LATEST, tag)


def prune(ckpt_dir: str | Path, keep_last: int | None, protect: str) -> list[str]:
    """Delete all but the ``keep_last`` newest ``global_stepN`` dirs (never ``protect``); returns removed tags."""
    if keep_last is None:
        return []
    steps = sorted(
        ((int(m.group(1)), p) for p in Path(ckpt_dir).iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()),
        reverse=True,
    )
    removed = []
    for _, path in steps[keep_last:]:
        if path.name != protect:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path.name)
    return removed
