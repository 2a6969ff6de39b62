"""Small readers of the test server's state: artifacts, run logs, and whether a pid is still alive."""

from __future__ import annotations

from pathlib import Path


def artifact(key: str, flow_run_id=None):
    """The newest artifact with ``key`` (of one flow run when given): other tests create the same keys."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey
    from prefect.client.schemas.sorting import ArtifactSort

    where = ArtifactFilter(key=ArtifactFilterKey(any_=[key]))
    if flow_run_id is not None:
        where.flow_run_id = ArtifactFilterFlowRunId(any_=[flow_run_id])
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=where, sort=ArtifactSort.CREATED_DESC, limit=1)
    return found[0] if found else None


def run_logs(flow_run_id) -> list[str]:
    from prefect import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return [log.message for log in logs]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie waiting to be reaped does not count)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
