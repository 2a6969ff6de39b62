"""A checkpoint's manifest: the size and xxh3-128 digest of every file its save wrote; writing and checking it.

Layout, ``<tag>/bloomtrain_manifest.json`` (rank 0 writes it last, after gathering every rank's entries, before
``latest`` moves)::

    {"format_version": 1, "digest": "xxh3_128",
     "files": {"<path relative to the tag>": {"bytes": 1234, "xxh3_128": "<32 hex digits>", "rank": R}, ...}}

Files DeepSpeed writes besides its checkpoint engine (none in bloomtrain's configurations) are not listed and
not checked. A save routes every write of a rank through its ``SaveLedger``: each file is written atomically
(bloomdata.durable) through a ``DigestWriter``, so its digest costs no second read. When a write finds the disk
full, the ledger stops writing and only counts the bytes of the rest of the save (serialised into nowhere), so
the save's error can say exactly how much space it needed (bloomtrain.checkpoint.checkpointer).

Checking (``check_files``) reads each listed file once, in 16 MiB chunks, and compares size, then digest; the
first difference is a ``Damage`` with one line naming the file and the kind: ``missing``, ``size`` (truncated
or grown), ``content`` (same size, other bytes) or ``manifest`` (the manifest itself unreadable). A tag without
a manifest was written before bloomtrain recorded digests (or by Megatron-DeepSpeed): it carries none.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal, cast

from pydantic import BaseModel

from bloomdata import durable
from bloomdata.disk import is_disk_full, size_text
from bloomdata.errors import BloomstackError

MANIFEST_FILE = "bloomtrain_manifest.json"
FORMAT_VERSION = 1


class FileDigest(BaseModel):
    bytes: int
    xxh3_128: str
    rank: int
    """The global rank that wrote it."""


class Manifest(BaseModel):
    format_version: int = FORMAT_VERSION
    digest: Literal["xxh3_128"] = "xxh3_128"
    files: dict[str, FileDigest]


class CheckpointDamaged(BloomstackError):
    """A checkpoint file differs from what its save recorded (or is missing): one line naming it and how."""


@dataclass(frozen=True)
class Damage:
    path: str
    kind: Literal["missing", "size", "content", "manifest"]
    detail: str

    def line(self) -> str:
        return f"{self.path}: {'missing' if self.kind == 'missing' else f'damaged ({self.kind})'}: {self.detail}"


class SaveLedger:
    """One rank's files of one save: writes them (``write``, shaped as ``durable.write_with``), records their sizes
    and digests, and after a full disk counts the bytes the rest of the save needed instead of writing them."""

    def __init__(self, tag_dir: Path, rank: int) -> None:
        self.tag_dir, self.rank = Path(tag_dir), rank
        self.files: dict[str, FileDigest] = {}
        self.needed = 0
        """Bytes of every file of this save on this rank: written, or counted once the disk was full."""
        self.full: str | None = None
        """The file whose write found the disk full (None: none did)."""

    def write(self, path: str | os.PathLike[str], fill: Callable[[IO[bytes]], object]) -> None:
        if self.full is None:
            tee = durable.DigestWriter()

            def through(f: IO[bytes]) -> None:
                tee.f = f
                fill(cast(IO[bytes], tee))  # write and flush: all the writers (torch.save, JSON) call

            try:
                durable.write_with(path, through)
            except Exception as exc:
                if not is_disk_full(exc):
                    raise
                self.full = os.fspath(path)  # durable removed its temp file
            else:
                rel = Path(path).resolve().relative_to(self.tag_dir.resolve()).as_posix()
                self.files[rel] = FileDigest(bytes=tee.bytes, xxh3_128=tee.hexdigest(), rank=self.rank)
                self.needed += tee.bytes
                return
        counter = durable.DigestWriter()  # to nowhere: the bytes this file needed
        fill(cast(IO[bytes], counter))
        self.needed += counter.bytes


def write_manifest(tag_dir: Path, files: dict[str, FileDigest], write: durable.Writer = durable.write_with) -> None:
    """The tag's manifest, listing ``files`` (every rank's): write it after all of them, before ``latest`` moves."""
    data = durable.json_text(Manifest(files=dict(sorted(files.items()))), indent=1).encode("utf-8")
    write(Path(tag_dir) / MANIFEST_FILE, lambda f: f.write(data))


def manifest_of(tag_dir: Path) -> Manifest | Damage | None:
    """The tag's manifest; None when it has none (written before digests were recorded); a Damage when unreadable."""
    path = Path(tag_dir) / MANIFEST_FILE
    if not path.exists():
        return None
    try:
        return Manifest.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        first = " ".join(str(exc).split())[:120]
        return Damage(str(path), "manifest", f"not a readable manifest ({first}); the checkpoint cannot be verified")


def check_file(tag_dir: Path, name: str, recorded: FileDigest) -> Damage | None:
    """Size, then content, of one listed file against the manifest."""
    path = Path(tag_dir) / name
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return Damage(str(path), "missing", f"the manifest lists it ({size_text(recorded.bytes)}, written by rank "
                                            f"{recorded.rank})")
    if size != recorded.bytes:
        return Damage(str(path), "size", f"{size:,} bytes, the save wrote {recorded.bytes:,} "
                                         f"({'cut short' if size < recorded.bytes else 'grown'})")
    found = durable.file_digest(path)
    if found != recorded.xxh3_128:
        return Damage(str(path), "content", f"its xxh3-128 digest is {found}, the save recorded {recorded.xxh3_128} "
                                            "(same size, other bytes)")
    return None


def check_files(tag_dir: Path, manifest: Manifest, names: Iterable[str]) -> Damage | None:
    """The first damaged file among ``names`` (in the order given); None when all verify. Files are checked on
    ``check_threads()`` threads (the hash releases the GIL and reads the page cache through a memory map)."""
    names = list(names)
    with ThreadPoolExecutor(max_workers=check_threads(len(names))) as pool:
        found = pool.map(lambda name: check_file(tag_dir, name, manifest.files[name]), names)
        return next((damage for damage in found if damage is not None), None)


def check_threads(files: int) -> int:
    """Threads for one rank's check: this process's cores shared among the node's ranks (LOCAL_WORLD_SIZE), at
    most 8, at least 1."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(files, 8, cores // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))))


def share(manifest: Manifest, rank: int, world: int) -> list[str]:
    """The files ``rank`` checks when ``world`` ranks share the work: sizes dealt out largest first (greedy), so
    each rank reads about the same number of bytes; every rank computes the same deal."""
    loads = [0] * world
    mine = []
    for name, entry in sorted(manifest.files.items(), key=lambda kv: (-kv[1].bytes, kv[0])):
        least = min(range(world), key=lambda r: (loads[r], r))
        loads[least] += entry.bytes
        if least == rank:
            mine.append(name)
    return sorted(mine)


class PendingCheck:
    """This rank's share of one tag's check, started in a thread so that it runs while the engine is built (the
    hash releases the GIL): ``bloomtrain.train.build_trainer`` starts one for the tag ``latest`` names, and the
    Checkpointer's load takes its ``verdict`` before any tensor is read. A missing directory or an unreadable
    manifest is known at once, the same on every rank."""

    def __init__(self, tag_dir: Path, rank: int, world: int) -> None:
        self.tag_dir = Path(tag_dir)
        found = manifest_of(self.tag_dir) if self.tag_dir.is_dir() else \
            Damage(str(self.tag_dir), "missing", "the checkpoint directory is gone")
        self.found = found
        self._damage: Future[Damage | None] | None = None
        if isinstance(found, Manifest):
            pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="bloomtrain-check")
            self._damage = pool.submit(check_files, self.tag_dir, found, share(found, rank, world))
            pool.shutdown(wait=False)

    def verdict(self) -> Verdict:
        """This rank's verdict (waits for the thread): the manifest's own damage, else the first damaged file of
        this rank's share."""
        if self.found is None or isinstance(self.found, Damage):
            return Verdict(digests=self.found is not None, damage=self.found)
        assert self._damage is not None
        return Verdict(digests=True, damage=self._damage.result())


@dataclass(frozen=True)
class Verdict:
    """What checking one tag found."""

    digests: bool
    """The tag has a manifest (False: written before digests were recorded; nothing was checked)."""
    damage: Damage | None
    files: int = 0
    bytes: int = 0


def verify_tag(tag_dir: Path, select: Callable[[str], bool] | None = None) -> Verdict:
    """Check every file of the tag's manifest (``select``: only the names it accepts), in this process."""
    found = manifest_of(tag_dir)
    if found is None:
        return Verdict(digests=False, damage=None)
    if isinstance(found, Damage):
        return Verdict(digests=True, damage=found)
    names = [n for n in sorted(found.files) if select is None or select(n)]
    return Verdict(digests=True, damage=check_files(tag_dir, found, names), files=len(names),
                   bytes=sum(found.files[n].bytes for n in names))
