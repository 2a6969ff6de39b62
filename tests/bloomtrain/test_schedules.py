"""LR and batch-size schedules against megatron-core; the pretraining sampler's order and DP split."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from megatron.core.num_microbatches_calculator import RampupBatchsizeNumMicroBatchesCalculator
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

from bloomtrain.config import OptimConfig, ScheduleConfig
from bloomtrain.data import pretraining_indices
from bloomtrain.schedules import BatchSchedule, LRSchedule, is_done


@pytest.mark.parametrize("style", ["cosine", "linear", "constant"])
def test_lr_matches_megatron_core(style):
    optim = OptimConfig(lr=6e-5, min_lr=6e-6)
    sched = ScheduleConfig(global_batch_size=16, train_samples=5000, warmup_samples=1000, decay_samples=4000,
                           decay_style=style)
    ours = LRSchedule.from_config(optim, sched)
    ref = OptimizerParamScheduler(SimpleNamespace(param_groups=[{}]), init_lr=0.0, max_lr=6e-5, min_lr=6e-6,
                                  lr_warmup_steps=1000, lr_decay_steps=4000, lr_decay_style=style,
                                  start_wd=0.1, end_wd=0.1, wd_incr_steps=5000, wd_incr_style="constant")
    for samples in [0, 1, 500, 999, 1000, 1001, 2000, 2500, 3999, 4000, 4001, 5000, 10**7]:
        ref.num_steps = samples
        assert ours(samples) == pytest.approx(ref.get_lr({}), rel=1e-12, abs=1e-18), samples


def test_batch_rampup_matches_megatron_core():
    # tr11's form at a small scale: start 192, +16, over 9765 samples, GBS 2048, MBS 2, DP 8
    sched = ScheduleConfig(micro_batch_size=2, global_batch_size=2048, rampup_batch_size=(192, 16, 9765),
                           train_samples=10**6)
    ours = BatchSchedule.from_config(sched)
    ref = RampupBatchsizeNumMicroBatchesCalculator(2048, 2, 8, False, 0, 192, 16, 9765)
    for consumed in [0, 1, 84, 85, 86, 1000, 5000, 9764, 9765, 9766, 10**6]:
        ref.update(consumed, consistency_check=True)
        assert ours(consumed) == ref.get_current_global_batch_size(), consumed
    assert ours(0) == 192 and ours(10**6) == 2048


def test_training_length_in_samples_or_iterations():
    by_samples = ScheduleConfig(global_batch_size=8, train_samples=20)
    assert not is_done(by_samples, 2, 16) and is_done(by_samples, 3, 24)
    by_iters = ScheduleConfig(global_batch_size=8, train_iters=3)
    assert not is_done(by_iters, 2, 10**9) and is_done(by_iters, 3, 0)


def test_sampler_order_is_global_and_split_by_dp_rank():
    mbs, dp, total = 2, 3, 40
    per_rank = [list(pretraining_indices(0, mbs, r, dp, total)) for r in range(dp)]
    # micro-batch k of rank r = indices [k*mbs*dp + r*mbs, ... + mbs)
    assert per_rank[1][0] == [2, 3] and per_rank[2][1] == [10, 11]
    merged = [i for k in range(len(per_rank[0])) for r in range(dp) for i in per_rank[r][k]]
    assert merged == list(range(36))  # drop_last: 40 // 6 * 6
    # resuming at consumed_samples continues exactly where the full run would be
    resumed = list(pretraining_indices(12, mbs, 1, dp, total))
    assert resumed == per_rank[1][2:]


def test_sampler_rejects_a_resume_off_the_group_boundary():
    from bloomdata.errors import BloomstackError

    with pytest.raises(BloomstackError, match="micro_batch_size x DP"):
        next(pretraining_indices(5, 2, 0, 2, 100))
