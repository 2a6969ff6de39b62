"""Run-wide fixtures. The Prefect test server is opt-in: only tests that name ``prefect_harness`` start it.

The suite runs the same whatever the libraries' own environment variables say in the developer's shell. Prefect
reads its settings from the environment when it is first imported, so the isolation below is set here, before
any test module imports prefect: every inherited ``PREFECT_*`` setting is dropped (a ``PREFECT_API_URL`` of a
real server, a profile, another database), then a throwaway PREFECT_HOME (database, result storage, profiles),
no analytics, and a server start-up timeout that fits a loaded 2-core box (measured 20-40 s here).
``TOKENIZERS_PARALLELISM`` is dropped too (set to true, a Rust thread pool used before a fork deadlocks the
forked gloo ranks; unset, tokenizers turns it off after a fork itself); ``OMP_NUM_THREADS`` is set below;
``DS_ACCELERATOR`` is left as it is (the tests that launch training set it, and the rest hold either way).

Tiers (tests/tiers.py): a test that starts a process is marked ``integration``; collection stops on one that
is not, so ``make test-fast`` (``-m "not integration and not gpu"``) never runs one.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.small_disk import SmallDisk, mounted
from tests.tiers import unmarked_launchers

for _name in [k for k in os.environ if k.startswith("PREFECT_") or k == "TOKENIZERS_PARALLELISM"]:
    del os.environ[_name]  # never talk to a developer's real server, profile or database from tests
_PREFECT_HOME = tempfile.mkdtemp(prefix="bloomstack-prefect-")
os.environ["PREFECT_HOME"] = _PREFECT_HOME
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"

# Under pytest-xdist, each worker's torch (and the trainers, Dask workers and demo it starts, which inherit the
# environment) would use every core for its intra-op threads: on 2 cores with 2 workers, 4+ OpenMP threads spin
# against each other. A test of small CPU ops then ran 3x slower (test_bpb_equals_transformers_loop[7] beside two
# busy processes: 16.3 s with 2 threads, 5.5 s with 1). The cores are shared out instead, whatever the shell's
# OMP_NUM_THREADS says (a 64 would oversubscribe these cores, and tests' timeouts fit this share).
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
os.environ["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // _WORKERS))

# Without a GPU the flash-attention tests run Triton's CPU interpreter. Triton reads TRITON_INTERPRET when
# triton.language is first imported, and DeepSpeed imports it on its own first import (any test module that
# imports bloomtrain's engine), so the choice is made here, before any test module is collected.
import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


# `make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup --no-loadscope-reorder`): most
# tests wait on subprocesses, servers and disks, and one process left a 2-core machine ~1/3 idle (1,310 s). A group
# runs whole on one worker: the modules that use the demo's run or the Prefect server (session fixtures: once per
# worker, so once in all), and otherwise each module (its module-scoped fixtures, the Slurm cluster included,
# start once). The two shared groups are the longest (~5 min each) and CPU-bound: queued first, side by side, they
# slowed each other (1,195 s in all), so the demo's group goes first and the Prefect group halfway. The groups are
# made here, by module: xdist's own xdist_group marks rename node ids through an attribute pytest 9.2 no longer
# reads.
XDIST_GROUPS = {"demo_run": "demo", "prefect_harness": "prefect"}
ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def group_of(module: str) -> str:
    """The group of the tests in ``module`` (a path from the repository root): a shared session fixture's when
    the module names it, else the module's own."""
    text = (ROOT / module).read_text(encoding="utf-8")
    return next((group for fixture, group in XDIST_GROUPS.items() if fixture in text), module)


def _module(nodeid: str) -> str:
    return nodeid.split("::")[0]


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: `pytest -p no:xdist` and installs without it
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByTestGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(_module(nodeid))

    return ByTestGroup(config, log)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: every collected test is checked, in either tier
def pytest_collection_modifyitems(config, items):
    """Stops on a test that starts a process without the ``integration`` marker (tests/tiers.py); then the demo's
    group first and the Prefect group halfway through the modules (the order workers take them)."""
    unmarked = unmarked_launchers(items)
    if unmarked:
        raise pytest.UsageError("\n".join(unmarked))
    by_group: dict[str, list[pytest.Item]] = {"demo": [], "prefect": [], "": []}
    for item in items:
        group = group_of(_module(item.nodeid))
        by_group[group if group in by_group else ""].append(item)
    rest = by_group[""]
    items[:] = by_group["demo"] + rest[:len(rest) // 2] + by_group["prefect"] + rest[len(rest) // 2:]


def pytest_unconfigure(config):
    shutil.rmtree(_PREFECT_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """One Prefect API server (temporary SQLite) for the whole run; result storage in a tmp dir.

    Never nest another ``prefect_test_harness`` inside: its exit would stop this shared server.
    """
    from prefect.settings import PREFECT_RESULTS_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    store = tmp_path_factory.mktemp("prefect-results")
    with temporary_settings({PREFECT_RESULTS_LOCAL_STORAGE_PATH: store}):
        with prefect_test_harness(server_startup_timeout=180):
            yield


@pytest.fixture
def small_disk(tmp_path) -> Iterator[SmallDisk]:
    """A 5 MiB tmpfs mounted at ``tmp_path/disk`` for the test (root only: tests/harness/small_disk.py), unmounted
    after."""
    with mounted(tmp_path / "disk") as disk:
        yield disk


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """``make demo`` once for the run, at small sizes on a terminal (tests/harness/demo_run.py): its console, output
    folder (Prefect database, model card, logs) and the files the docs' commands build on."""
    from tests.harness.demo_run import run_demo

    run = run_demo(tmp_path_factory.mktemp("demo"))
    assert run.returncode == 0, "\n".join(run.lines[-40:])
    return run
