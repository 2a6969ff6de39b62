"""Universal checkpoints: save at TP2, convert with DeepSpeed's ds_to_universal, resume at PP2 and at DP2.

The continuation must match resuming the same checkpoint in its own layout (to 2e-4: the layouts
reduce in different orders), which checks our universal_checkpoint_info patterns: averaged LayerNorms and
row-parallel biases, dim-1 row-parallel weights, a pipeline-replicated tied embedding, no duplicate embed LN.
"""

from __future__ import annotations

import shutil

import pytest

from bloomtrain.checkpoint.tags import commit_tag, read_latest
from tests.bloomtrain.train_helpers import EXACT, FORCE_BF16, train_rank
from tests.harness.gloo_harness import run_distributed

pytestmark = pytest.mark.integration  # tests/tiers.py

BF16 = [*EXACT, *FORCE_BF16, "checkpoint.save_interval=3", "checkpoint.keep_last=null"]


def _run(world: int, overrides: list[str]) -> dict:
    results = run_distributed(train_rank, world, overrides, timeout_s=300)
    for r in results:
        assert r["error"] is None, r["error"]
    return results[0]


def test_universal_resume_at_other_layouts(tmp_path):
    saved, same = tmp_path / "saved", tmp_path / "same"
    _run(2, [*BF16, "parallel.tp=2", "schedule.train_iters=3", f"checkpoint.dir={saved}"])
    assert read_latest(saved) == "global_step3"
    shutil.copytree(saved, same)

    reference = _run(2, [*BF16, "parallel.tp=2", "schedule.train_iters=5", f"checkpoint.dir={same}"])
    assert sorted(reference["losses"]) == [4, 5]

    for layout in (["parallel.pp=2"], ["parallel.tp=1"]):  # TP2 -> PP2 x TP1, TP2 -> DP2
        shutil.rmtree(saved / "global_step5", ignore_errors=True)
        commit_tag(saved, "global_step3")
        r = _run(2, [*BF16, *layout, "schedule.train_iters=5", f"checkpoint.dir={saved}",
                     "checkpoint.load_universal=true"])
        assert (saved / "global_step3_universal" / "zero").is_dir()
        assert r["position"]["consumed_samples"] == reference["position"]["consumed_samples"]
        for it in (4, 5):
            assert r["losses"][it] == pytest.approx(reference["losses"][it], rel=2e-4), (layout, it)
    # a restart in the new layout loads its own checkpoint directly: no second conversion
    r = _run(2, [*BF16, "parallel.tp=1", "schedule.train_iters=6", f"checkpoint.dir={saved}",
                 "checkpoint.load_universal=true"])
    assert sorted(r["losses"]) == [6] and not (saved / "global_step5_universal").exists()


def test_resuming_another_layout_without_universal_says_how(tmp_path):
    _run(1, [*BF16, "schedule.train_iters=1", f"checkpoint.dir={tmp_path}"])
    results = run_distributed(train_rank, 2, [*BF16, "schedule.train_iters=2", f"checkpoint.dir={tmp_path}"],
                              timeout_s=300)
    assert "saved at tp=1 pp=1 dp=1" in results[0]["error"] and "load_universal=true" in results[0]["error"]
