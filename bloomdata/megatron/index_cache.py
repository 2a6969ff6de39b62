"""On-disk cache for index arrays: keyed by a hash of what determines them, atomic, verified, locked.

Megatron's caches fail in three known ways (reference megatron-data.md section 2.8): files are written in
place, so a crash leaves a truncated or zero-filled ``.npy`` that later counts as a hit; concurrent jobs
race; and the build is serialised through ``torch.distributed`` barriers. Here:

- the file stem is ``{sha256(description)[:32]}-{kind}-{split}``, where ``description`` holds everything
  that determines the arrays (dataset identity, document range, split, compat mode, tokenizer, seed,
  lengths, counts), so a change to any of them is a miss, never a stale hit;
- each array is written to a temporary file in the same directory, fsynced and renamed; the
  ``-description.json`` (the description itself plus each file's size and sha256) is written the same
  way, last, so it only ever describes complete files;
- a load checks the description, every size and every sha256 (about 1 s per GB); any mismatch is a miss,
  and the arrays are rebuilt and rewritten;
- builders serialise on a ``filelock`` lock file next to the arrays: the first process builds, the
  others wait and then load the verified files. No process group is needed, so it works on node-local
  disks, across jobs, and before ``torch.distributed`` exists.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from collections.abc import Callable

import numpy as np
from filelock import FileLock

from bloomdata.errors import BloomstackError

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1
LOCK_TIMEOUT_S = 6 * 3600.0  # a BLOOM-scale build takes minutes; a lock held for hours is a dead builder


def description_key(description: dict) -> str:
    """sha256 of the canonical JSON of ``description`` (sorted keys), first 32 hex digits."""
    blob = json.dumps(description, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:32]


def _sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: str, write: Callable) -> None:
    tmp = f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class IndexCache:
    """Cached arrays ``{stem}-{name}.npy`` plus ``{stem}-description.json`` in ``cache_dir``."""

    def __init__(self, cache_dir: str | os.PathLike, kind: str, split_name: str, description: dict):
        self.cache_dir = os.fspath(cache_dir)
        self.description = {"format_version": FORMAT_VERSION, "kind": kind, **description}
        self.key = description_key(self.description)
        self.stem = os.path.join(self.cache_dir, f"{self.key}-{kind}-{split_name}")

    def array_path(self, name: str) -> str:
        return f"{self.stem}-{name}.npy"

    @property
    def description_path(self) -> str:
        return f"{self.stem}-description.json"

    def load(self, names: list[str], verify: bool = True) -> dict[str, np.ndarray] | None:
        """The cached arrays (memory-mapped), or None when anything is missing, stale or corrupt."""
        try:
            with open(self.description_path, encoding="utf-8") as f:
                recorded = json.load(f)
        except (OSError, ValueError):
            return None
        if recorded.get("description") != json.loads(json.dumps(self.description, default=str)):
            logger.warning("%s: description differs from the request; rebuilding", self.description_path)
            return None
        files = recorded.get("files", {})
        arrays = {}
        for name in names:
            path, entry = self.array_path(name), files.get(name)
            if entry is None or not os.path.isfile(path) or os.path.getsize(path) != entry.get("bytes"):
                logger.warning("%s: missing or truncated; rebuilding", path)
                return None
            if verify and _sha256(path) != entry.get("sha256"):
                logger.warning("%s: checksum mismatch (corrupt); rebuilding", path)
                return None
            try:
                arrays[name] = np.load(path, mmap_mode="r", allow_pickle=False)
            except (OSError, ValueError):
                logger.warning("%s: unreadable; rebuilding", path)
                return None
        return arrays

    def save(self, arrays: dict[str, np.ndarray]) -> None:
        files = {}
        for name, array in arrays.items():
            path = self.array_path(name)
            _write_atomic(path, lambda f, a=array: np.save(f, np.ascontiguousarray(a), allow_pickle=False))
            files[name] = {
                "bytes": os.path.getsize(path),
                "sha256": _sha256(path),
                "dtype": np.dtype(array.dtype).str,
                "shape": list(array.shape),
            }
        record = {"description": self.description, "files": files}
        blob = json.dumps(record, indent=2, sort_keys=True, default=str).encode("utf-8")
        _write_atomic(self.description_path, lambda f: f.write(blob))
        _fsync_dir(self.cache_dir)

    def load_or_build(
        self, names: list[str], build: Callable[[], dict[str, np.ndarray]], verify: bool = True
    ) -> tuple[dict[str, np.ndarray], bool]:
        """(arrays, built): load a verified hit, else build once under the lock and publish.

        Several processes may call this at once for the same key: one builds, the others block on
        the lock and then load what it wrote.
        """
        arrays = self.load(names, verify)
        if arrays is not None:
            return arrays, False
        try:
            os.makedirs(self.cache_dir, exist_ok=True)
        except OSError as exc:
            raise BloomstackError(f"{self.cache_dir}: cannot create the index cache directory ({exc.strerror})") from None
        with FileLock(f"{self.stem}.lock", timeout=LOCK_TIMEOUT_S):
            arrays = self.load(names, verify)  # built by another process while we waited
            if arrays is not None:
                return arrays, False
            built = build()
            missing = set(names) - set(built)
            if missing:
                raise RuntimeError(f"index builder did not return {sorted(missing)}")
            self.save({name: built[name] for name in names})
        return {name: built[name] for name in names}, True
