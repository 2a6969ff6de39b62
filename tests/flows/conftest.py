"""Fixtures shared by the flow tests (the Prefect server fixture, ``prefect_harness``, is in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def dask_address():
    """An existing Dask cluster (one thread worker, in this process) for dataset_flow's address path."""
    from distributed import LocalCluster

    # dashboard on a free port: several engineers' test runs share this machine's 8787
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                      dashboard_address=":0") as cluster:
        yield cluster.scheduler_address
