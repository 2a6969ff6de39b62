"""``checkpoint.save_interval: auto``: Young/Daly's interval from the measured save and step times and the MTBF,
recomputed after the first saves, agreed by every rank, carried across a resume."""

from __future__ import annotations

import math
import statistics

import pytest

from bloomtrain.callbacks.base import CHECKPOINT, Callback
from bloomtrain.callbacks.checkpointing import CheckpointCallback
from bloomtrain.checkpoint.interval import PROBE_STEPS, RECOMPUTE_SAVES, AutoInterval, interval_iterations
from bloomtrain.checkpoint.tags import step_tags
from bloomtrain.config import load_config
from tests.bloomtrain.train_helpers import EXACT, TINY, train_rank
from tests.harness.gloo_harness import run_distributed


def test_the_interval_is_sqrt_of_twice_the_save_time_times_the_mtbf_in_iterations():
    # 60 s per save, 24 h between failures: sqrt(2 x 60 x 86,400) = 3,220 s = 161 iterations of 20 s
    assert interval_iterations(60.0, 20.0, 24 * 3600.0) == 161
    assert interval_iterations(1.0, 1.0, 50.0) == 10  # sqrt(100)
    assert interval_iterations(1e-6, 10.0, 1.0) == 1  # never below one iteration
    # an asynchronous save's write (30 s) outlasts Young/Daly's 10 s: saving sooner would wait for it
    assert interval_iterations(1.0, 1.0, 50.0, write_s=30.0) == 30


def test_the_first_save_measures_then_the_interval_is_recomputed_after_the_first_saves():
    auto = AutoInterval(mtbf_hours=0.01)  # 36 s
    auto.last_saved = 100  # resumed at 100, nothing measured
    for it in range(101, 101 + PROBE_STEPS):
        auto.observe_step(9.0 if it == 101 else 1.0)  # the first step of a process warms up: left out
        assert auto.due(it) is (it == 100 + PROBE_STEPS)
    assert auto.local_step_s() == 1.0
    assert auto.wants_recompute()
    auto.saved(103, cost_s=2.0, step_s=1.0, write_s=0.0)
    assert auto.interval == 12  # sqrt(2 x 2 x 36)
    assert not auto.due(114) and auto.due(115)
    auto.saved(115, cost_s=8.0, step_s=1.0, write_s=0.0)
    assert auto.interval == round(math.sqrt(2 * 5.0 * 36))  # the median of 2 and 8 s
    auto.saved(134, cost_s=2.0, step_s=1.0, write_s=0.0)
    assert auto.interval == 12 and RECOMPUTE_SAVES == 3
    assert not auto.wants_recompute()  # from now on the interval stays
    auto.saved(146)
    assert auto.interval == 12 and auto.last_saved == 146
    line = auto.describe()
    assert line == ("checkpoint.save_interval=auto: every 12 iterations: sqrt(2 x 2.000 s per save x 0.01 h MTBF) = "
                    "12 s of training at 1.000 s per iteration (the save's cost: the median of the last 3)")

    resumed = AutoInterval(mtbf_hours=0.01)
    resumed.load(auto.state())  # what the checkpoint carries
    resumed.last_saved = 146
    assert resumed.interval == 12 and not resumed.due(157) and resumed.due(158)  # no probe after a resume


def test_save_interval_auto_in_the_config():
    cfg = load_config(TINY, ["checkpoint.save_interval=auto", "checkpoint.mtbf_hours=6", "checkpoint.async_save=true"])
    assert cfg.checkpoint.save_interval == "auto" and cfg.checkpoint.mtbf_hours == 6.0 and cfg.checkpoint.async_save
    assert load_config(TINY, ["checkpoint.save_interval=7"]).checkpoint.save_interval == 7
    with pytest.raises(Exception, match="mtbf_hours"):
        load_config(TINY, ["checkpoint.mtbf_hours=0"])


class IntervalProbe(Callback):
    """Records, after every iteration's save, the auto interval and what it was computed from."""

    priority = CHECKPOINT - 1

    def __init__(self) -> None:
        self.recorded: list[dict] = []

    def pre_train(self, trainer) -> None:
        self.auto = next(cb for cb in trainer.callbacks if isinstance(cb, CheckpointCallback)).auto
        self.recorded.append({"start": trainer.pos.iteration, "interval": self.auto.interval})

    def post_step(self, trainer, step) -> None:
        a = self.auto
        self.recorded.append({"iteration": step.iteration, "interval": a.interval, "last_saved": a.last_saved,
                              "costs": list(a.save_costs), "step_s": a.step_s, "write_s": a.write_s})


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_auto_interval_run_saves_where_the_formula_says_on_every_rank(tmp_path, mode):
    mtbf_hours = 5e-5  # 0.18 s: saves of a few ms then come every few iterations
    run = [*EXACT, "parallel.pp=2", "schedule.train_iters=24", f"checkpoint.dir={tmp_path}",
           "checkpoint.keep_last=null",
           "checkpoint.save_interval=auto", f"checkpoint.mtbf_hours={mtbf_hours}",
           f"checkpoint.async_save={str(mode == 'async').lower()}"]
    results = run_distributed(train_rank, 2, run, None, lambda: [IntervalProbe()], timeout_s=300)
    for r in results:
        assert r["error"] is None, r["error"]
    records = [r["recorded"][0] for r in results]
    assert records[0] == records[1]  # every rank computed the same interval at every iteration
    start, *steps = records[0]
    assert start == {"start": 0, "interval": None}
    saves = [s["iteration"] for s in steps if s["last_saved"] == s["iteration"]]
    assert saves[0] == PROBE_STEPS  # the first save measures the save time
    for s in steps:
        if s["iteration"] in saves[:RECOMPUTE_SAVES]:  # recomputed from the agreed measurements
            assert s["interval"] == interval_iterations(statistics.median(s["costs"]), s["step_s"], mtbf_hours * 3600,
                                                        s["write_s"])
        if len(saves) > RECOMPUTE_SAVES and s["iteration"] >= saves[RECOMPUTE_SAVES - 1]:
            assert s["interval"] == steps[saves[RECOMPUTE_SAVES - 1] - 1]["interval"]  # then it stays
    for before, after in zip(saves, saves[1:]):
        assert after - before == steps[before - 1]["interval"]  # saved exactly one interval later
    assert sorted(int(t.removeprefix("global_step")) for t in step_tags(tmp_path)) == sorted({*saves, 24})

    # a resumed run starts with the interval its checkpoint's measurements give
    resumed = run_distributed(train_rank, 2, [*run, "schedule.train_iters=26"], None, lambda: [IntervalProbe()],
                              timeout_s=300)
    first = resumed[0]["recorded"][0][0]
    assert first["start"] == 24 and first["interval"] is not None
