"""Remote inputs on this machine: a local S3-compatible server (moto's) and an HTTP server with range requests.

Both listen on 127.0.0.1 only and stop with their context. Clients find the S3 server the standard way
(``AWS_ENDPOINT_URL`` and ``AWS_*`` in the environment: ``s3_env``), as they would a real endpoint.

``serve_http(root)``: files under ``root`` over HTTP/1.1 with ``HEAD``, ``Range: bytes=a-b`` (206 Partial Content,
what fsspec's HTTP filesystem asks for each block), ``ETag`` (of the file's size and mtime, like nginx's) and
``Last-Modified``; ``requests`` counts the requests per method and whether they were ranged.
"""

from __future__ import annotations

import contextlib
import email.utils
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import fsspec

PLANTED_SECRET = "bloomstack-planted-SECRET-d41d8cd98f00b204"  # the secret key a test puts in the environment


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def forget_filesystems() -> None:
    """Drop the filesystems this process made (ours and fsspec's instance caches): the next one reads the
    environment again (another endpoint, other credentials)."""
    from bloomdata.readers import fs

    fs._filesystem.cache_clear()
    for cls in list(fsspec.registry.values()):  # the classes imported so far
        with contextlib.suppress(Exception):
            cls.clear_instance_cache()


def s3_env(port: int) -> dict[str, str]:
    """The environment of a client of the local S3 server: its endpoint and a planted secret key."""
    return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": PLANTED_SECRET, "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull}


@contextlib.contextmanager
def moto_server(timeout_s: float = 60) -> Iterator[int]:
    """``moto_server`` on a free port of 127.0.0.1; yields the port, stops it on exit."""
    port = free_port()
    exe = Path(sys.executable).with_name("moto_server")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "moto.server"]
    proc = subprocess.Popen([*cmd, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + timeout_s
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"moto_server did not start on port {port} (exit {proc.poll()})")
            time.sleep(0.1)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def upload(port: int, bucket: str, root: Path, prefix: str = "") -> None:
    """Every file under ``root`` to ``s3://bucket/prefix/<relative path>`` (the bucket made if needed)."""
    import boto3

    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1")
    with contextlib.suppress(client.exceptions.BucketAlreadyOwnedByYou):
        client.create_bucket(Bucket=bucket)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = "/".join(filter(None, [prefix.strip("/"), path.relative_to(root).as_posix()]))
        client.upload_file(str(path), bucket, key)


class _RangeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    root: Path
    counts: Counter[str]

    def log_message(self, *args) -> None:  # quiet
        pass

    def _target(self) -> Path | None:
        path = (self.root / self.path.split("?", 1)[0].lstrip("/")).resolve()
        return path if path.is_file() and self.root in path.parents else None

    def _head(self, path: Path, status: int, length: int, extra: dict[str, str]) -> None:
        st = path.stat()
        self.send_response(status)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{st.st_size:x}-{st.st_mtime_ns:x}"')
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()

    def do_HEAD(self) -> None:  # noqa: N802
        self.counts["HEAD"] += 1
        path = self._target()
        if path is None:
            self.send_error(404)
            return
        self._head(path, 200, path.stat().st_size, {})

    def do_GET(self) -> None:  # noqa: N802
        path = self._target()
        if path is None:
            self.counts["GET"] += 1
            self.send_error(404)
            return
        size = path.stat().st_size
        spec = self.headers.get("Range", "")
        if not spec.startswith("bytes="):
            self.counts["GET"] += 1
            self._head(path, 200, size, {})
            self.wfile.write(path.read_bytes())
            return
        self.counts["GET range"] += 1
        first, _, last = spec[len("bytes="):].partition("-")
        lo = int(first) if first else max(size - int(last), 0)
        hi = min(int(last), size - 1) if first and last else size - 1
        if lo >= size:
            self._head(path, 416, 0, {"Content-Range": f"bytes */{size}"})
            return
        with open(path, "rb") as f:
            f.seek(lo)
            data = f.read(hi - lo + 1)
        self._head(path, 206, len(data), {"Content-Range": f"bytes {lo}-{hi}/{size}"})
        self.wfile.write(data)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:  # a client closing a kept-alive connection
        pass


@contextlib.contextmanager
def serve_http(root: Path) -> Iterator[tuple[str, Counter[str]]]:
    """An HTTP server with range requests over ``root`` on 127.0.0.1; yields (base URL, request counts)."""
    counts: Counter[str] = Counter()
    handler = type("Handler", (_RangeHandler,), {"root": root.resolve(), "counts": counts})
    server = _QuietServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", counts
    finally:
        server.shutdown()
        server.server_close()
