"""Durable sharded jobs: the runner ``bloomdata build`` and ``bloomdata clean`` share, and where their steps run.

- ``runner.py``: ``ShardedJob`` (lock, stray temps, up-to-date check, output-holds-an-input check, the summary
  as the job's marker), ``Placement`` (one Dask client for a run's stages, with progress bars),
  ``strict_error`` (the one --strict message);
- ``executor.py``: ``run_shards`` and ``dask_client``, the only module of bloomdata that imports Dask.
"""
