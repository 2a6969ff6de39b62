"""A real full disk for tests: a small tmpfs that the test mounts (``mount -t tmpfs -o size=5m``) and unmounts.

Mounting needs root. CI runs as root, and so do these machines; a non-root run fails with one line saying so
rather than skipping, since a skipped fault test proves nothing (GUIDE: 0 skipped apart from gpu).

``SmallDisk.fill(leave)`` writes a ballast file so that about ``leave`` bytes stay free (tmpfs counts whole 4 KiB
pages); ``free()`` deletes it: "the user frees space". The fixture ``small_disk`` (tests/conftest.py) yields one
mounted under the test's tmp_path and always unmounts it in teardown, lazily if a killed process still holds it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from bloomdata.disk import free_bytes

PAGE = 4096
CHUNK = 1 << 20


class SmallDisk:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.ballast = path / "ballast.bin"

    def available(self) -> int:
        return free_bytes(self.path)

    def fill(self, leave: int) -> int:
        """Write the ballast so that ``leave`` bytes (rounded down to pages) stay free; returns the bytes free."""
        self.free()
        size = max(0, self.available() - leave // PAGE * PAGE)
        with open(self.ballast, "wb") as f:
            for start in range(0, size, CHUNK):
                f.write(b"\0" * min(CHUNK, size - start))
        return self.available()

    def free(self) -> None:
        self.ballast.unlink(missing_ok=True)


@contextmanager
def mounted(path: Path, size: str = "5m") -> Iterator[SmallDisk]:
    if os.geteuid() != 0:
        pytest.fail(f"this test mounts a tmpfs (mount -t tmpfs -o size={size}) to make a real full disk, which needs "
                    "root: run the suite as root (CI does)", pytrace=False)
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield SmallDisk(path)
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], check=True)  # a process still holds it: detach now
