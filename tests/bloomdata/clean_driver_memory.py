"""What a clean run's driver still holds, per shard, as its filter stage ends and once every stage is done:
``python -m tests.bloomdata.clean_driver_memory OUT_DIR`` prints ``{"held": {shards: bytes}, "at_filter_end":
{shards: bytes}}`` for in-process runs (``workers=0``) of 3 and of 15 one-document-per-language shards.

Its own process, because tracemalloc counts every thread's allocations: inside a pytest worker, the Dask cluster
another test left running (its IO loop, heartbeats, log records) added 0-12 KB a shard at random (CI failed at
10.8 KB against an 8 KB bound; here, three runs: 3.8-4.0 KB). Tracing covers each run from its start
to its summary only (the report's chart and a warm-up run are not traced: 50 s of a traced test were those)."""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc
from pathlib import Path
from typing import Any

from bloomdata.clean import CleanConfig, run_clean
from bloomdata.clean import run as clean_run
from bloomdata.jobs.placement import Placement
from bloomdata.readers import SourceConfig
from tests.data import CORPUS_DIR

LANGUAGES = 12  # one document each, in every shard
SIZES = (3, 15)  # shards of the two traced runs; bytes a shard = (figure at 15 - figure at 3) / (15 - 3)


def _traced() -> int:
    """Bytes still allocated since tracing started (a collection first: what is garbage is not held)."""
    gc.collect()
    return sum(t.size for t in tracemalloc.take_snapshot().traces)


def measure(tmp: Path) -> dict[str, dict[int, int]]:
    rows = [json.loads(p.read_text(encoding="utf-8").splitlines()[0]) for p in sorted(CORPUS_DIR.glob("*.jsonl"))]
    held: dict[int, int] = {}
    at_filter_end: dict[int, int] = {}
    summarize, placement_map = clean_run._summary, Placement.map

    def at_summary(job: Any, stages: Any) -> Any:  # what the run holds once every stage is done
        if tracemalloc.is_tracing():
            held[len(job.plan.shards)] = _traced()
            tracemalloc.stop()
        return summarize(job, stages)

    def map_then_trace(where: Placement, name: str, *args: Any, **kwargs: Any) -> list[Any]:
        results = placement_map(where, name, *args, **kwargs)
        if name == "filter" and tracemalloc.is_tracing():  # and as the filter stage's last result comes in
            at_filter_end[len(results)] = _traced()
        return results

    clean_run._summary = at_summary  # type: ignore[assignment]
    Placement.map = map_then_trace  # type: ignore[method-assign]
    for shards, traced in ((SIZES[-1], False), *((s, True) for s in SIZES)):  # imports and caches first
        inputs = []
        for i in range(shards):
            path = tmp / f"in{shards}{traced}" / f"f{i:03d}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps({"text": f"{r['text']} {i}", "lang": r["lang"]}, ensure_ascii=False)
                                    + "\n" for r in rows[:LANGUAGES]), encoding="utf-8")
            inputs.append(path)
        config = CleanConfig(sources=[SourceConfig(paths=[str(p)]) for p in inputs],
                             out_dir=str(tmp / f"out{shards}{traced}"), progress=False, workers=0)
        gc.collect()
        if traced:
            tracemalloc.start()
        run_clean(config)
    return {"held": held, "at_filter_end": at_filter_end}


if __name__ == "__main__":
    print(json.dumps(measure(Path(sys.argv[1]))))
