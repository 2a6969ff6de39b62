"""Durable sharded jobs: the runner ``bloomdata build`` and ``bloomdata clean`` share, and where their steps run.

- ``runner.py``: ``ShardedJob`` (lock, stray temps, up-to-date check, output-holds-an-input check, the first
  stage's reuse of marked shards, the summary as the job's marker), ``strict_error`` (the one --strict message);
- ``executor.py``: ``run_shards`` and ``dask_client`` (the dashboard on request), the only module of bloomdata
  that imports Dask;
- ``placement.py``: ``Placement`` (one Dask client for a run's stages, with progress bars).

A lost cluster is ``bloomdata.errors.ClusterLost``.
"""

# This package's files in layers, lowest first: a file imports only files of lower layers (every import, those
# inside functions too; tests/test_layering.py checks it). The runner never reaches the executor: a job is given
# its ``Where``.
LAYERS = (
    "runner",
    "executor",
    "placement",
    "__init__",
)
