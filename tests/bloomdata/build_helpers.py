"""Constants and helpers shared by the build tests (test_build.py, test_build_sharding.py); their fixtures are in
conftest.py."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from bloomdata import durable
from bloomdata.build import BuildConfig, run_build
from bloomdata.build.config import SHARDS_DIR
from bloomdata.build.summary import BuildSummary
from bloomdata.readers import SourceConfig

LANGS = ("en", "fr", "zh", "ar")
REPO = Path(__file__).resolve().parents[2]
BIG_ROWS, BIG_SHARD_ROWS = 4 * (160 + 160 + 146 + 160), 300
BIG_SHARDS = -(-BIG_ROWS // BIG_SHARD_ROWS)  # 9


def _config(inputs, tok, out, **kw) -> BuildConfig:
    sources = [SourceConfig(paths=[str(p)]) for p in inputs]
    return BuildConfig(sources=sources, tokenizer=str(tok), out_dir=str(out), progress=False, **kw)


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in (".bin", ".idx")}


def _temps(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if ".tmp-" in p.name]


def build_killing_a_worker(config: BuildConfig, client=None, timeout_s: float = 90) -> BuildSummary:
    """``run_build`` in a thread while the first worker process seen writing a shard is SIGKILLed (its pid is in
    the temp file's name, ``<name>.tmp-<pid>-<random>``); Dask reruns that task. Returns the build's summary."""
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(summary=run_build(config, client=client)))
    thread.start()
    killed, deadline = None, time.time() + timeout_s
    while killed is None and thread.is_alive() and time.time() < deadline:
        for tmp in (Path(config.out_dir) / SHARDS_DIR).glob("*/*.bin.tmp-*"):
            pid = int(tmp.name.split(durable.TEMP_INFIX)[1].split("-")[0])
            if pid != os.getpid():
                os.kill(pid, signal.SIGKILL)
                killed = pid
                break
        time.sleep(0.005)
    thread.join(2 * timeout_s)
    assert killed is not None, "the build finished before a worker could be killed"
    return result["summary"]
