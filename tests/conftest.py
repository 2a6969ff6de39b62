"""Run-wide fixtures. The Prefect test server is opt-in: only tests that name ``prefect_harness`` start it.

Prefect reads its settings from the environment when it is first imported, so the isolation below is set
here, before any test module imports prefect: a throwaway PREFECT_HOME (database, result storage, profiles),
no analytics, and a server start-up timeout that fits a loaded 2-core box (measured 20-40 s here).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from tests.small_disk import SmallDisk, mounted

_PREFECT_HOME = tempfile.mkdtemp(prefix="bloomstack-prefect-")
os.environ["PREFECT_HOME"] = _PREFECT_HOME
os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
os.environ.pop("PREFECT_API_URL", None)  # never talk to a developer's real server from tests

# Without a GPU the flash-attention tests run Triton's CPU interpreter. Triton reads TRITON_INTERPRET when
# triton.language is first imported, and DeepSpeed imports it on its own first import (any test module that
# imports bloomtrain's engine), so the choice is made here, before any test module is collected.
import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


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
    """A 5 MiB tmpfs mounted at ``tmp_path/disk`` for the test (root only: tests/small_disk.py), unmounted after."""
    with mounted(tmp_path / "disk") as disk:
        yield disk


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """``make demo`` once for the run, at small sizes on a terminal (tests/demo_run.py): its console, output folder
    (Prefect database, model card, logs) and the files the docs' commands build on."""
    from tests.demo_run import run_demo

    run = run_demo(tmp_path_factory.mktemp("demo"))
    assert run.returncode == 0, "\n".join(run.lines[-40:])
    return run
