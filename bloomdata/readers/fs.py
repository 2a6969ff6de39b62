"""Where input bytes come from: local paths, or any fsspec URL (``s3://``, ``gs://``, ``http(s)://``, ``hf://``, ...).

Every reader opens, stats and lists its inputs through these functions, so a remote object is read the same way as a
local file: seeks and short reads (HTTP range requests, S3/GCS ranged GETs) for the planner's cuts, streamed blocks
for a shard. Local paths take the plain ``open``/``os`` calls they always did (no fsspec on that path, no cost).

Credentials and endpoints are never ours: each filesystem takes them from its library's standard environment and
config (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``/``AWS_PROFILE``, ``~/.aws``; gcloud's
application default credentials; the Hugging Face token), and no storage option is passed or recorded, so a
summary, marker, log line or error names the URL and nothing else. A URL holding a password (``user:pw@host``) is
refused: its password would be written wherever the path is. The s3 and gcs filesystems are optional installs
(``pip install 'bloomstack[s3]'`` / ``[gcs]``); a missing one is one line naming the extra.

``input_stamp(path)`` is what a completion marker records of an input: size and mtime (ns) of a local file, as before;
size plus the ETag / last-modified / generation fields a remote filesystem reports, so a changed object is rebuilt.
"""

from __future__ import annotations

import functools
import io
import os
import re
from typing import IO, Any
from urllib.parse import urlsplit

from bloomdata.errors import BloomstackError

URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# protocol -> (pip package, our extra) of the optional filesystems; others come with fsspec or huggingface_hub
EXTRAS = {"s3": ("s3fs", "s3"), "s3a": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"),
          "http": ("aiohttp", "http"), "https": ("aiohttp", "http"), "hf": ("huggingface_hub", "hf")}
# fields of a remote object's info() that change when its bytes do (S3, GCS, HTTP, HF Hub, Azure, ...)
STAMP_FIELDS = ("ETag", "etag", "LastModified", "last_modified", "Last-Modified", "mtime", "updated", "generation",
                "VersionId", "blob_id", "md5Hash", "content_md5")
PLAN_BLOCK = 1 << 16  # bytes per request when the planner seeks around a remote file (cuts, headers, footers)
READ_BLOCK = 8 << 20  # bytes per request when a shard streams a remote file


def protocol_of(path: str) -> str | None:
    """``s3`` of ``s3://b/k``; None for a local path (``file://`` URLs count as local)."""
    match = URL.match(path)
    if match is None or match.group(1).lower() == "file":
        return None
    return match.group(1).lower()


def is_remote(path: str) -> bool:
    return protocol_of(path) is not None


def local_path(path: str) -> str:
    """A local path as the OS takes it (``file://`` stripped)."""
    return path[len("file://"):] if path.lower().startswith("file://") else path


def check_url(path: str) -> None:
    """Refuse a URL that carries a password: it would be written wherever the path is (summaries, rejects)."""
    if is_remote(path) and urlsplit(path).password is not None:
        host = urlsplit(path).hostname or "?"
        raise BloomstackError(f"{protocol_of(path)}://{host}/...: the URL holds a password; give credentials "
                              "through the protocol's environment or config (AWS_*, ~/.aws, gcloud, HF token), "
                              "never in the path")


@functools.lru_cache(maxsize=32)
def _filesystem(protocol: str) -> Any:
    import fsspec

    try:
        return fsspec.filesystem(protocol)
    except ImportError as exc:
        package, extra = EXTRAS.get(protocol, (None, None))
        fix = f"pip install 'bloomstack[{extra}]'" if extra else f"install fsspec's {protocol} support"
        raise BloomstackError(f"reading {protocol}:// needs {package or 'a filesystem package'}, which is not "
                              f"installed ({exc.msg if hasattr(exc, 'msg') else exc}); {fix}") from None
    except ValueError as exc:  # fsspec: "Protocol not known"
        raise BloomstackError(f"{protocol}://: no fsspec filesystem is registered for it ({exc})") from None


def filesystem(path: str) -> Any:
    """The fsspec filesystem of a remote path (one per protocol and process, credentials from its environment)."""
    protocol = protocol_of(path)
    assert protocol is not None, path
    check_url(path)
    return _filesystem(protocol)


def remote_error(path: str, exc: BaseException) -> BloomstackError:
    """One line for a failed remote call, naming the URL and the failure, never the request's headers."""
    kind = "not found" if isinstance(exc, FileNotFoundError) else type(exc).__name__
    detail = str(exc).splitlines()[0][:200] if str(exc) else ""
    if isinstance(exc, PermissionError) or "AccessDenied" in detail or "403" in detail:
        kind = "access denied (check the protocol's credentials in the environment)"
    return BloomstackError(f"cannot read input {path}: {kind}" + (f" ({detail})" if detail and kind != detail else ""))


def open_input(path: str, block_size: int = READ_BLOCK) -> IO[bytes]:
    """A buffered binary stream of the file's raw bytes, seekable (ranged reads for a remote one)."""
    if not is_remote(path):
        try:
            return open(local_path(path), "rb", buffering=1 << 20)
        except OSError as exc:
            raise BloomstackError(f"cannot read input {path}: {exc.strerror or exc}") from None
    fs = filesystem(path)
    try:
        raw = fs.open(path, "rb", block_size=block_size, cache_type="readahead")
    except Exception as exc:  # every filesystem has its own errors: all of them are one line here
        raise remote_error(path, exc) from None
    return io.BufferedReader(raw, buffer_size=1 << 20) if isinstance(raw, io.RawIOBase) or \
        hasattr(raw, "readinto") else raw


def info(path: str) -> dict[str, Any]:
    fs = filesystem(path)
    try:
        return fs.info(path)
    except Exception as exc:
        raise remote_error(path, exc) from None


def input_bytes(path: str) -> int:
    """Bytes of the input file."""
    if not is_remote(path):
        try:
            return os.path.getsize(local_path(path))
        except OSError as exc:
            raise BloomstackError(f"cannot read input {path}: {exc.strerror or exc}") from None
    found = info(path).get("size")
    if found is None:
        raise BloomstackError(f"cannot read input {path}: the server does not say its size (no Content-Length)")
    return int(found)


def input_stamp(path: str) -> dict[str, Any]:
    """What a completion marker records of an input: it changes when the file does."""
    if not is_remote(path):
        try:
            st = os.stat(local_path(path))
        except OSError as exc:
            raise BloomstackError(f"cannot read input {path}: {exc.strerror}") from None
        return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
    found = info(path)
    return {"size": found.get("size"), **{k: str(found[k]) for k in STAMP_FIELDS if found.get(k) is not None}}


def _kind(path: str) -> str | None:
    """"file", "directory" or None (missing) of a remote path, from one metadata request (a HEAD for http: its
    ``exists`` would GET the whole object)."""
    fs = filesystem(path)
    try:
        return fs.info(path).get("type", "file")
    except FileNotFoundError:
        return None
    except Exception as exc:
        raise remote_error(path, exc) from None


def exists(path: str) -> bool:
    return os.path.exists(local_path(path)) if not is_remote(path) else _kind(path) is not None


def isdir(path: str) -> bool:
    return os.path.isdir(local_path(path)) if not is_remote(path) else _kind(path) == "directory"


def isfile(path: str) -> bool:
    return os.path.isfile(local_path(path)) if not is_remote(path) else _kind(path) == "file"


def join(directory: str, name: str) -> str:
    return f"{directory.rstrip('/')}/{name}" if is_remote(directory) else os.path.join(directory, name)


def _unstrip(path: str, like: str) -> str:
    """fsspec's listings drop the protocol (``bucket/key``): put it back as ``like`` has it."""
    protocol = protocol_of(like)
    return path if protocol_of(path) or protocol is None else f"{like[:len(protocol) + 3]}{path.lstrip('/')}"


def glob(pattern: str) -> list[str]:
    """Sorted matches of a glob; a remote protocol that cannot list (http) is one line saying so."""
    fs = filesystem(pattern)
    try:
        found = fs.glob(pattern)
    except NotImplementedError:
        raise BloomstackError(f"{pattern}: {protocol_of(pattern)}:// cannot list files; give each file's URL") \
            from None
    except Exception as exc:
        raise remote_error(pattern, exc) from None
    return sorted(_unstrip(p, pattern) for p in found)


def walk(directory: str) -> list[tuple[str, list[str], list[str]]]:
    """(root, sorted dirs, sorted files) under a remote directory, top-down, like ``os.walk``."""
    fs = filesystem(directory)
    try:
        found = [(_unstrip(root, directory), sorted(dirs), sorted(files)) for root, dirs, files in fs.walk(directory)]
    except NotImplementedError:
        raise BloomstackError(f"{directory}: {protocol_of(directory)}:// cannot list a directory; give each "
                              "file's URL") from None
    except Exception as exc:
        raise remote_error(directory, exc) from None
    return sorted(found)


def read_text(path: str) -> str:
    """A small file's text (``state.json``, ``dataset_dict.json``)."""
    with open_input(path, PLAN_BLOCK) as fh:
        return fh.read().decode("utf-8")


def read_bytes(path: str, start: int | None = None, end: int | None = None) -> bytes:
    """Bytes ``[start, end)`` of a remote file in one request (a ranged GET; the whole file when both are None)."""
    fs = filesystem(path)
    try:
        return fs.cat_file(path, start=start, end=end)
    except Exception as exc:
        raise remote_error(path, exc) from None
