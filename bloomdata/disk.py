"""Full disks: recognising one, the filesystem and free bytes of a path, and the one-line error that names them.

A write that finds no space raises ``OSError`` with ``errno`` ENOSPC (or EDQUOT: a quota, the same to a user).
Whoever catches one turns it into a ``DiskFull`` (a ``BloomstackError``: the CLIs print its one line and exit 2,
because a retry would fill the same disk; the user must free space or write elsewhere) through ``disk_full``,
which names the output folder, its filesystem (mount point and type), the bytes the work needs and the bytes
free there. What "needs" means is the caller's: a checkpoint save counts every byte it would have written
(``bloomtrain.checkpoint.manifest``), a build or clean run estimates what is left to write
(``bloomdata.jobs.runner``), a tokenizer knows its files before writing them.

``DiskFull`` pickles (its fields ride in ``__dict__``), so a Dask worker can hand one back to the client.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass

from bloomdata.errors import BloomstackError

NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")  # numpy: "%ld requested and %ld written"


def no_space_error(exc: BaseException | None) -> OSError | None:
    """The ``OSError`` for a full disk (ENOSPC) or an exhausted quota (EDQUOT) that ``exc`` is, or that was being
    handled when ``exc`` was raised: a library may fail again as it cleans up (``torch.save``'s zip writer raises a
    RuntimeError from its ``__exit__`` after the write's OSError), so the exception's chain is searched. numpy's
    ``tofile`` (``np.save`` to a file) reports a short write without an errno: "12000 requested and 9200 written";
    on a regular file only a full disk or quota makes one, short of a failing disk or a file size limit."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OSError) and (exc.errno in NO_SPACE
                                         or exc.errno is None and _SHORT_WRITE.fullmatch(str(exc))):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


def is_disk_full(exc: BaseException | None) -> bool:
    """``exc`` comes from a full disk (``no_space_error``)."""
    return no_space_error(exc) is not None


def size_text(n: int) -> str:
    """``6,291,456 bytes (6.3 MB)``: exact, then rounded in decimal units."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if abs(n) >= scale:
            return f"{n:,} bytes ({n / scale:.1f} {unit})"
    return f"{n:,} bytes"


@dataclass(frozen=True)
class Filesystem:
    """The filesystem holding a path: its mount point, type and device; total and free bytes (for non-root)."""

    mount: str
    fstype: str
    device: str
    total: int
    free: int

    def describe(self) -> str:
        return f"the {self.fstype} filesystem mounted at {self.mount} ({self.device})"


def _existing(path: str) -> str:
    """``path`` or its nearest existing ancestor (an output folder may not exist yet)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def _mount_of(path: str) -> str:
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def _mount_entry(mount: str) -> tuple[str, str]:
    """(device, fstype) of the mount point, from /proc/self/mounts (the last entry wins: it is on top)."""
    found = ("unknown device", "unknown")
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[1].replace("\\040", " ") == mount:
                    found = (parts[0], parts[2])
    except OSError:
        pass
    return found


def filesystem(path: str | os.PathLike[str]) -> Filesystem:
    """The filesystem that holds ``path`` (or would: its nearest existing ancestor)."""
    where = _existing(os.fspath(path))
    st = os.statvfs(where)
    mount = _mount_of(where)
    device, fstype = _mount_entry(mount)
    return Filesystem(mount=mount, fstype=fstype, device=device, total=st.f_blocks * st.f_frsize,
                      free=st.f_bavail * st.f_frsize)


def tree_bytes(path: str | os.PathLike[str]) -> int:
    """The bytes of the files under ``path`` (0 when it is missing)."""
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, files in os.walk(path) for name in files)


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes an unprivileged writer can still use on the filesystem of ``path``."""
    st = os.statvfs(_existing(os.fspath(path)))
    return st.f_bavail * st.f_frsize


class DiskFull(BloomstackError):
    """A write found its disk full. ``folder``: where the work writes; ``needed``: the bytes it needs (None: not
    known); ``free``: the bytes free there when the error was made."""

    def __init__(self, message: str = "", *, keys: tuple[str, ...] | list[str] = (), folder: str = "",
                 needed: int | None = None, free: int | None = None) -> None:
        super().__init__(message, keys=keys)
        self.folder, self.needed, self.free = folder, needed, free


def disk_full(folder: str | os.PathLike[str], what: str, needed: int | None, then: str, *,
              key: str | None = None, estimated: bool = False) -> DiskFull:
    """The one-line error: ``{folder}: disk full on {filesystem}: {what} needs {needed}, {free} free; free space
    there or set {key} to another disk, then {then}``. ``estimated``: ``needed`` is an estimate ("about")."""
    folder = os.path.abspath(os.fspath(folder))
    fs = filesystem(folder)
    if needed is None:
        need = f"{what} needs more space than is left"
    else:
        need = f"{what} needs {'about ' if estimated else ''}{size_text(needed)}"
    elsewhere = f" or set {key} to another disk" if key else ""
    return DiskFull(f"{folder}: disk full on {fs.describe()}: {need}, {size_text(fs.free)} free; free space "
                    f"there{elsewhere}, then {then}", keys=[key] if key else [], folder=folder, needed=needed,
                    free=fs.free)


@contextlib.contextmanager
def raising_disk_full(what: str, then: str, folder: str | os.PathLike[str] | None = None,
                      key: str | None = None) -> Iterator[None]:
    """Inside: an ``OSError`` for a full disk becomes ``disk_full`` of ``folder`` (default: the folder of the file
    the error names, else the working directory), the bytes needed unknown."""
    try:
        yield
    except Exception as exc:
        error = no_space_error(exc)
        if error is None:
            raise
        if folder is not None:
            where = os.fspath(folder)
        elif error.filename:
            where = os.path.dirname(os.path.abspath(os.fsdecode(error.filename)))
        else:
            where = os.getcwd()
        raise disk_full(where, what, None, then, key=key) from None
