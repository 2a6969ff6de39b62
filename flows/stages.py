"""Skip-or-run for every flow: a stage is skipped when its outputs exist and were made from the same inputs.

A flow describes its stage with a ``Stage`` (name, output directory, key, the type of its result) and hands
``Stage.run`` the work; ``run`` owns the rest, the same way for every flow:

1. when ``<out_dir>/_stage.json`` records this key and every output it lists still exists, the stage is
   done: the result is read back from the marker (typed), ``publish`` shows its artifacts again, and the
   ``StageResult`` says ``skipped``;
2. otherwise ``work()`` runs, ``publish`` shows its artifacts, and the marker is written *last*, after
   every output ``outputs(result)`` names exists (``bloomdata.durable.write_marker``: atomic, fsynced).

The key is ``stage_key``: ``durable.content_key`` of the stage's config, the keys of the stages it consumes
(``upstream``) and its input files' sizes and mtimes, the same canonical-JSON sha256 the build's shard
markers and the index cache use. So:

- re-running a finished pipeline does nothing (every marker matches);
- re-running a failed one resumes at the failed stage (earlier markers match; the failed stage wrote none);
- editing a stage's config re-runs it *and every stage after it*, because a stage's key folds in the
  keys of the stages it consumes.

The trade-off: the key covers configs and upstream keys, not input bytes. A corpus edited in place under
the same path is not noticed unless its paths are passed as ``inputs`` (their sizes and mtimes are folded
in). A marker whose result no longer validates against the result type (an older format) means "not done":
the stage runs again rather than crash or hand on a wrong shape.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from bloomdata import durable
from bloomdata.readers import SourceConfig, input_stamp, resolve_files
from bloomdata.readers.fs import is_remote
from flows.interrupts import stage_interrupts

MARKER = "_stage.json"

R = TypeVar("R", bound=BaseModel)


class StageMarker(BaseModel):
    """What ``_stage.json`` holds (``key`` first on disk, as every durable marker)."""

    key: str  # stage_key(...) of the run that produced the outputs
    stage: str
    outputs: dict[str, str]  # name -> path; all must exist for the stage to count as done
    result: dict[str, Any] = {}  # the stage's typed result as JSON, read back when the stage is skipped
    config: Any = None  # the stage's config as JSON, for people reading the marker
    finished_at: str


class StageResult(BaseModel, Generic[R]):
    """What every stage flow returns: which stage, its key (what later stages fold in as ``upstream``),
    whether this run skipped it, where its outputs are, and the typed result of its work."""

    stage: str
    key: str
    skipped: bool
    out_dir: str
    result: R


def _fingerprint(given: str | Path) -> list[list[Any]]:
    """(relative name, size, mtime_ns) of a file, or of every file under a directory; for a remote URL (s3://, ...),
    its files' stamps (size, ETag, last-modified: ``bloomdata.readers.input_stamp``), a changed object changing them."""
    if isinstance(given, str) and is_remote(given):
        return [[path, input_stamp(path)] for path, _ in resolve_files(SourceConfig(paths=[given]))]
    path = Path(given)
    if path.is_dir():
        return [[str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns]
                for p in sorted(path.rglob("*")) if p.is_file()]
    if path.exists():
        return [[path.name, path.stat().st_size, path.stat().st_mtime_ns]]
    return [[path.name, None, None]]


def stage_key(config: Any, *, upstream: Iterable[str] = (), inputs: Iterable[str | Path] = ()) -> str:
    """The stage's key: ``durable.content_key`` of its config, the keys of the stages it reads, and the
    sizes and mtimes of its input files."""
    return durable.content_key({
        "config": config,
        "upstream": list(upstream),
        "inputs": {str(p): _fingerprint(p) for p in inputs},
    })


def read_marker(out_dir: str | Path) -> StageMarker | None:
    """The stage marker in ``out_dir`` whatever its key; None when missing or unreadable (an older format
    included: the stage then simply runs again)."""
    record = durable.read_json(Path(out_dir) / MARKER)
    try:
        return StageMarker.model_validate(record) if isinstance(record, dict) else None
    except ValidationError:
        return None


def completed(out_dir: str | Path, key: str) -> StageMarker | None:
    """The marker of a finished stage whose key is ``key`` and whose outputs all exist; else None."""
    marker = read_marker(out_dir)
    if marker is None or marker.key != key:
        return None
    if not all(Path(p).exists() for p in marker.outputs.values()):
        return None
    return marker


def write_marker(out_dir: str | Path, *, stage: str, key: str, outputs: Mapping[str, str | Path],
                 result: BaseModel | None = None, config: Any = None) -> StageMarker:
    """Record a finished stage. Call it after every output is in place: the marker is the commit point."""
    out = Path(out_dir)
    missing = [f"{k}={v}" for k, v in outputs.items() if not Path(v).exists()]
    if missing:
        raise FileNotFoundError(f"stage {stage}: outputs missing, refusing to mark it done: {', '.join(missing)}")
    marker = StageMarker(key=key, stage=stage, outputs={k: str(v) for k, v in outputs.items()},
                         result=result.model_dump(mode="json") if result is not None else {},
                         config=durable.to_jsonable(config), finished_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    out.mkdir(parents=True, exist_ok=True)
    durable.write_marker(out / MARKER, marker.key, marker.model_dump(mode="json", exclude={"key"}))
    return marker


def _logger() -> logging.Logger | logging.LoggerAdapter[logging.Logger]:
    """The flow run's logger inside a flow (its lines reach the UI); the module's logger outside one."""
    from prefect import get_run_logger  # noqa: PLC0415
    from prefect.exceptions import MissingContextError  # noqa: PLC0415

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger(__name__)


@dataclass(frozen=True)
class Stage(Generic[R]):
    """One stage of one run: what ``run`` needs to decide skip-or-run and to record the outcome."""

    name: str  # the stage's name in logs, the marker and StageResult.stage
    out_dir: Path  # where its outputs and _stage.json live (absolute)
    key: str  # stage_key(...) of what the outputs are made from
    result_type: type[R]  # the typed result the work returns (read back from the marker when skipped)
    config: Any = None  # recorded in the marker for people reading it

    def done(self) -> StageResult[R] | None:
        """The recorded result when this stage already finished with this key; None otherwise."""
        marker = completed(self.out_dir, self.key)
        if marker is None:
            return None
        try:
            result = self.result_type.model_validate(marker.result)
        except ValidationError:  # a marker of an older result shape: not done, run again
            return None
        return StageResult[self.result_type](  # type: ignore[name-defined]
            stage=self.name, key=self.key, skipped=True, out_dir=str(self.out_dir), result=result)

    def run(self, work: Callable[[], R], outputs: Callable[[R], Mapping[str, str | Path]],
            publish: Callable[[R], None] | None = None) -> StageResult[R]:
        """Skip when done, else ``work()`` and the marker over ``outputs(result)``; ``publish`` (the flow's
        artifacts) sees the result either way."""
        log = _logger()
        if (done := self.done()) is not None:
            log.info("%s: skipped, %s already holds %s %s", self.name, self.out_dir, self.name, self.key)
            if publish is not None:
                publish(done.result)
            return done
        with stage_interrupts(self.name):  # a Ctrl-C names this stage in its one line (flows.interrupts)
            result = work()
        if publish is not None:
            publish(result)
        write_marker(self.out_dir, stage=self.name, key=self.key, outputs=outputs(result), result=result,
                     config=self.config)
        return StageResult[self.result_type](  # type: ignore[name-defined]
            stage=self.name, key=self.key, skipped=False, out_dir=str(self.out_dir), result=result)
