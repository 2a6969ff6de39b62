"""A rank dies inside a save; the restarted run resumes from the last complete checkpoint, bit for bit.

A 2-rank run (pipeline stages 0 and 1: each rank writes its own layer, engine and RNG files) is killed
with ``os._exit`` from the Checkpointer's fault hook at each point of a save: after the first file the
engine wrote, after this rank's RNG and metadata files, and between the barrier and ``latest``; once on
rank 0, once on rank 1, at a seeded iteration. ``latest`` must then name a tag whose files are all there
(the same names as the uninterrupted run's), and the restarted run must reproduce the uninterrupted
run's fp32 losses exactly. Dropout is on, so a missing or wrong RNG file would change the losses.
"""

from __future__ import annotations

import os
import random

import pytest
import torch.distributed as dist

from bloomtrain.checkpoint.checkpointer import SAVE_POINTS
from bloomtrain.checkpoint.tags import read_latest, tag_for
from tests.bloomtrain.train_helpers import EXACT, train_rank
from tests.harness.gloo_harness import run_distributed, start_ranks

pytestmark = pytest.mark.integration  # tests/tiers.py

ITERS = 4
RUN = [*EXACT, "parallel.pp=2", "model.hidden_dropout=0.1", "model.attention_dropout=0.1",
       f"schedule.train_iters={ITERS}", "checkpoint.save_interval=1", "checkpoint.keep_last=2"]
KILLED = 86  # exit code of the killed rank

_draw = random.Random(1)  # fixed, seeded: the same save is interrupted on every run of the suite
CASES = [(point, rank, _draw.randint(2, ITERS)) for point in SAVE_POINTS for rank in (0, 1)]


class KillAt:
    """Fault hook: ``os._exit(KILLED)`` on ``rank`` when the save of ``tag`` reaches ``point``."""

    def __init__(self, point: str, rank: int, tag: str) -> None:
        self.point, self.rank, self.tag = point, rank, tag

    def __call__(self, point: str, tag: str) -> None:
        if (point, tag) == (self.point, self.tag) and dist.get_rank() == self.rank:
            os._exit(KILLED)


def _files(tag_dir) -> set[str]:
    return {str(p.relative_to(tag_dir)) for p in tag_dir.rglob("*") if p.is_file()}


def _check(results: list[dict]) -> list[dict]:
    for r in results:
        assert r["error"] is None, r["error"]
    return results


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    """The uninterrupted run: per-rank results and the file names of one complete checkpoint."""
    ckpt = tmp_path_factory.mktemp("baseline")
    results = _check(run_distributed(train_rank, 2, [*RUN, f"checkpoint.dir={ckpt}"], timeout_s=300))
    assert read_latest(ckpt) == tag_for(ITERS)
    files = _files(ckpt / tag_for(ITERS))
    assert {"rng/rank_00000.pt", "rng/rank_00001.pt", "bloomtrain_model.json", "mp_rank_01_model_states.pt",
            "layer_06-model_00-model_states.pt"} <= files
    return results, files


@pytest.mark.parametrize(("point", "rank", "iteration"), CASES, ids=[f"{p}-rank{r}-step{i}" for p, r, i in CASES])
def test_a_rank_killed_inside_a_save_resumes_from_the_last_complete_checkpoint(tmp_path, baseline, point, rank,
                                                                               iteration):
    expected_results, complete = baseline
    ckpt = tmp_path / "ckpt"
    run = [*RUN, f"checkpoint.dir={ckpt}"]
    outcomes = start_ranks(train_rank, 2, run, KillAt(point, rank, tag_for(iteration)), timeout_s=300).wait(30)
    assert outcomes[rank].exitcode == KILLED, outcomes[rank]
    peer = outcomes[1 - rank]  # it cannot finish without the dead rank: it fails in a collective
    assert peer.exitcode != 0 or peer.value["error"] is not None, peer

    # Only rank 0 moves `latest`: killing rank 1 after the barrier leaves a complete, committed tag.
    committed = iteration if (point, rank) == ("before_latest", 1) else iteration - 1
    assert read_latest(ckpt) == tag_for(committed)
    assert _files(ckpt / tag_for(committed)) == complete
    if point == "engine_file":
        assert _files(ckpt / tag_for(iteration)) < complete  # the interrupted save really was partial
    # at the later points every file of the interrupted tag is there, but only `latest` makes it a checkpoint

    resumed = _check(run_distributed(train_rank, 2, run, timeout_s=300))
    for got, want in zip(resumed, expected_results):
        assert sorted(got["losses"]) == list(range(committed + 1, ITERS + 1))
        for it in got["losses"]:
            assert got["losses"][it] == want["losses"][it], it  # bitwise: fp32 on CPU
        assert got["position"] == want["position"]
    assert read_latest(ckpt) == tag_for(ITERS)
    assert _files(ckpt / tag_for(ITERS)) == complete
