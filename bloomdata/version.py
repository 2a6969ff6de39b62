"""What ``bloomdata --version`` and ``bloomtrain --version`` print: the installed version and the git revision of
the source tree the packages run from (``+dirty`` when it has uncommitted changes), so a bug report names both."""

from __future__ import annotations

import subprocess
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "bloomstack"


def git_revision(where: Path = Path(__file__).resolve().parent) -> str | None:
    """The short commit of the git checkout holding ``where`` (``abc1234+dirty``), or None outside one."""
    try:
        rev = subprocess.run(["git", "-C", str(where), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{rev}+dirty" if dirty else rev


def version_line(prog: str) -> str:
    """``bloomdata 0.1.0 (git 1a2b3c4d5e6f)``; ``(not a git checkout)`` for an installed wheel."""
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        version = "unknown (not installed)"
    rev = git_revision()
    return f"{prog} {version} ({'git ' + rev if rev else 'not a git checkout'})"
