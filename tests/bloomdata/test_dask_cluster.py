"""Builds on a real Dask cluster started with the ``dask scheduler`` / ``dask worker`` commands, and its failures.

- A worker SIGKILLed mid-build: its nanny starts a new one, the shard is redone, the bytes are identical.
- The scheduler stopped mid-build: ``bloomdata build`` exits 2 with one line (the scheduler, the shards done,
  what to restart); after a restart, the rerun reuses the finished shards and writes identical bytes.
- Every worker gone (in-process, with the wait shortened): the same kind of one-line error; also when the last
  worker died holding a finished result (a fake future and client: the wait that hung once on CI).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from bloomdata.build import run_build
from bloomdata.build.config import SHARDS_DIR
from bloomdata.errors import BloomstackError, ClusterLost
from tests.bloomdata.build_helpers import (
    BIG_SHARD_ROWS,
    BIG_SHARDS,
    REPO,
    _config,
    _outputs,
    _temps,
    build_killing_a_worker,
)
from tests.harness.gloo_harness import free_port

DASK = str(Path(sys.executable).with_name("dask"))


class DaskCluster:
    """``dask scheduler`` and ``dask worker`` processes on one port, each in its own session, stopped by pid."""

    def __init__(self, tmp: Path) -> None:
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.tmp, self.scheduler, self.worker = tmp, None, None

    def start_scheduler(self) -> None:
        port = self.address.rsplit(":", 1)[1]
        self.scheduler = self._spawn([DASK, "scheduler", "--port", port, "--dashboard-address", ":0"], "scheduler")

    def start_worker(self) -> None:
        self.worker = self._spawn([DASK, "worker", self.address, "--nthreads", "1", "--nworkers", "1",
                                   "--no-dashboard"], "worker")
        from distributed import Client

        with Client(self.address, timeout="60s") as client:
            client.wait_for_workers(1, timeout=60)

    def _spawn(self, cmd: list[str], name: str) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "ab")  # noqa: SIM115 - closed with the process's end
        return subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)

    def stop(self, proc: subprocess.Popen | None, sig: int = signal.SIGTERM) -> None:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, sig)  # its session: the nanny and its worker process too
            proc.wait(30)


@pytest.fixture
def cluster(tmp_path):
    c = DaskCluster(tmp_path)
    c.start_scheduler()
    c.start_worker()
    yield c
    c.stop(c.worker, signal.SIGKILL)
    c.stop(c.scheduler, signal.SIGKILL)


def _config_on(cluster: DaskCluster, big_jsonl, tok, out):
    return _config([big_jsonl], tok, out, append_eod=True, max_rows_per_shard=BIG_SHARD_ROWS,
                   scheduler=cluster.address)


def _markers(out: Path) -> int:
    return len(list((out / SHARDS_DIR).glob("*.done.json")))


@pytest.mark.integration
def test_worker_killed_mid_build_on_a_dask_cli_cluster(tmp_path, cluster, big_jsonl, small_tokenizer_dir,
                                                       reference_big):
    out = tmp_path / "out"
    summary = build_killing_a_worker(_config_on(cluster, big_jsonl, small_tokenizer_dir, out))  # a nanny restarts it
    assert summary.shards.built == BIG_SHARDS
    assert _outputs(out) == reference_big
    assert not _temps(out)


@pytest.mark.integration
def test_stopped_scheduler_is_one_line_and_the_rerun_resumes(tmp_path, cluster, big_jsonl, small_tokenizer_dir,
                                                             reference_big):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "bloomdata.cli", "build", "--input", str(big_jsonl), "--tokenizer",
           str(small_tokenizer_dir), "--out", str(out), "--append-eod", "--max-rows-per-shard",
           str(BIG_SHARD_ROWS), "--scheduler", cluster.address, "--no-progress"]
    build = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 90
    while not _markers(out) and time.time() < deadline:
        assert build.poll() is None, build.communicate()
        time.sleep(0.005)
    cluster.stop(cluster.scheduler)
    stopped = time.monotonic()
    _, stderr = build.communicate(timeout=60)
    assert build.returncode == 2 and time.monotonic() - stopped < 20
    done = _markers(out)  # the worker may finish its shard after the scheduler went: at least what was said
    said = int(re.search(r" with (\d+) of ", stderr)[1])
    assert 1 <= said <= done < BIG_SHARDS
    assert stderr == (f"bloomdata build: error: lost the Dask scheduler at {cluster.address} with {said} of "
                      f"{BIG_SHARDS} shards done (a rerun reuses them): restart it (`dask scheduler`) and its "
                      f"workers (`dask worker {cluster.address}`), then rerun the same command\n")

    cluster.stop(cluster.worker)  # restart both, as the message says
    cluster.start_scheduler()
    cluster.start_worker()
    summary = run_build(_config_on(cluster, big_jsonl, small_tokenizer_dir, out))
    assert summary.shards.reused == done and summary.shards.built == BIG_SHARDS - done
    assert _outputs(out) == reference_big
    assert not _temps(out)


@pytest.mark.integration
def test_every_worker_gone_is_one_line(tmp_path, cluster, big_jsonl, small_tokenizer_dir, monkeypatch):
    from bloomdata.jobs import executor

    monkeypatch.setattr(executor, "WORKERS_GONE_S", 1.0)
    monkeypatch.setattr(executor, "POLL_S", 0.5)
    out = tmp_path / "out"
    result: dict = {}

    def build() -> None:
        try:
            run_build(_config_on(cluster, big_jsonl, small_tokenizer_dir, out))
        except BloomstackError as exc:
            result["error"] = exc

    thread = threading.Thread(target=build)
    thread.start()
    deadline = time.time() + 90
    while not _markers(out) and time.time() < deadline:
        time.sleep(0.005)
    cluster.stop(cluster.worker)
    thread.join(60)
    error = result["error"]
    assert isinstance(error, ClusterLost)
    assert str(error).startswith(f"the Dask scheduler at {cluster.address} has had no workers for 1 s with ")
    assert str(error).endswith(f"start workers with `dask worker {cluster.address}`, then rerun the same command")


class _LostResult:
    """A finished future whose worker died before its result was gathered: Dask reschedules the key, and with
    no worker left its ``result()`` never returns (each bounded wait times out)."""

    key = "tokenize_shard-lost-0"

    def result(self, timeout=None):
        if timeout is None:
            time.sleep(3600)  # what Dask's unbounded wait did (the test's thread is a daemon)
        time.sleep(min(timeout, 0.01))
        raise TimeoutError


class _NoWorkers:
    """An external scheduler's client whose workers are all gone."""

    cluster = None
    status = "running"

    class scheduler:  # noqa: N801 - the attribute Dask's Client has
        address = "tcp://127.0.0.1:1"

    def nthreads(self) -> dict:
        return {}


def test_a_result_lost_with_its_worker_ends_in_cluster_lost_not_a_hang(monkeypatch):
    """CI hung here once (test_every_worker_gone_is_one_line): 'Couldn't gather 1 keys, rescheduling' left
    ``future.result()`` waiting forever; the result is now taken in bounded waits that check the workers."""
    from bloomdata.jobs import executor

    monkeypatch.setattr(executor, "WORKERS_GONE_S", 0.05)
    monkeypatch.setattr(executor, "POLL_S", 0.01)
    done: dict = {}
    thread = threading.Thread(target=lambda: done.setdefault("error", _raises(executor._result, _NoWorkers(),
                                                                              _LostResult())), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "run_shards' result wait did not notice that every worker was gone"
    assert isinstance(done["error"], ClusterLost)
    assert str(done["error"]).startswith("the Dask scheduler at tcp://127.0.0.1:1 has had no workers for ")


def _raises(fn, *args) -> BaseException | None:
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001 - returned for the assertion
        return exc
    return None
