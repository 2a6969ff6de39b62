"""Flow tests need the real ``distributed`` package (Dask), which tests/distributed.py (the gloo harness,
imported as ``tests.gloo_harness``) shadows once pytest puts tests/ on sys.path. Drop that entry and any
shim already imported, as tests/bloomdata/test_build.py does; spawned processes copy sys.path, so this also
keeps Dask workers started from these tests sane."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _TESTS]
_shim = sys.modules.get("distributed")
if _shim is not None and Path(_shim.__file__).resolve().parent == _TESTS:
    del sys.modules["distributed"]


@pytest.fixture(scope="session")
def dask_address():
    """An existing Dask cluster (one thread worker, in this process) for dataset_flow's address path."""
    from distributed import LocalCluster

    # dashboard on a free port: several engineers' test runs share this machine's 8787
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                      dashboard_address=":0") as cluster:
        yield cluster.scheduler_address
