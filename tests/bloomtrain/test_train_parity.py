"""The trainer on CPU/gloo: single process vs plain PyTorch, and every 3D layout vs the single process.

Each layout runs once (module-scoped fixtures), five fp32 steps of the tiny model on fixed synthetic data;
the per-step losses must match the single-process run within fp32 tolerance. The single-process run itself
must match a plain PyTorch loop over ``BloomModel`` (AdamW, clip_grad_norm_, micro-batch accumulation).
"""

from __future__ import annotations

import math

import pytest
import torch

from bloomtrain.config import load_config
from bloomtrain.data import build_datasets, collate
from bloomtrain.engine import param_groups
from bloomtrain.model.bloom import BloomModel
from bloomtrain.schedules import BatchSchedule, LRSchedule, is_done
from tests.bloomtrain.train_helpers import EXACT, FORCE_BF16, TINY, train_rank
from tests.harness.gloo_harness import run_distributed

pytestmark = pytest.mark.integration  # tests/tiers.py

RTOL = 2e-5


def _run(world: int, overrides: list[str]) -> list[dict]:
    results = run_distributed(train_rank, world, overrides, timeout_s=300)
    for r in results:
        assert r["error"] is None, r["error"]
    return results


EVAL = ["logging.eval_interval=5", "logging.eval_iters=2"]


@pytest.fixture(scope="module")
def single():
    return _run(1, [*EXACT, *EVAL])[0]


def plain_pytorch_losses(overrides: list[str]) -> list[float]:
    """The same training with no DeepSpeed, no pipeline: BloomModel + torch AdamW."""
    cfg = load_config(TINY, overrides)
    torch.manual_seed(0)
    model = BloomModel(cfg.model)
    opt = torch.optim.AdamW(param_groups(model, cfg.optim.weight_decay), lr=cfg.optim.lr,
                            betas=(cfg.optim.beta1, cfg.optim.beta2), eps=cfg.optim.eps)
    lr_at = LRSchedule.from_config(cfg.optim, cfg.schedule)
    batch_at = BatchSchedule.from_config(cfg.schedule)
    train, _ = build_datasets(cfg)
    mbs = cfg.schedule.micro_batch_size
    losses, consumed, iteration = [], 0, 0
    while not is_done(cfg.schedule, iteration, consumed):
        gbs = batch_at(consumed)
        for g in opt.param_groups:
            g["lr"] = lr_at(consumed)
        total = 0.0
        for start in range(consumed, consumed + gbs, mbs):
            ids, (labels, mask) = collate([train[i] for i in range(start, start + mbs)])
            loss = model.loss(model(ids), labels, mask) / (gbs // mbs)
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.clip_grad)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(total)
        consumed += gbs
        iteration += 1
    return losses


def test_single_process_matches_plain_pytorch(single):
    ours = [single["losses"][i] for i in range(1, 6)]
    ref = plain_pytorch_losses(EXACT)
    assert ours == pytest.approx(ref, rel=RTOL)
    assert ours[-1] < ours[0] - 0.05  # it actually trained
    assert single["optimizer"] == "ClippedAdamW"


def _assert_matches(single, results):
    ref = [single["losses"][i] for i in range(1, 6)]
    ref_norms = [single["grad_norms"][i] for i in range(1, 6)]
    assert min(ref_norms) > 0.5  # the clip (0.5) is active: the global norm decides every update
    for r in results:  # every rank reports the DP-averaged loss broadcast along the pipe
        got = [r["losses"][i] for i in range(1, 6)]
        assert got == pytest.approx(ref, rel=RTOL), (r["coords"], got, ref)
        # TP duplicates and the tied embedding are counted once: the same global norm in every layout
        norms = [r["grad_norms"][i] for i in range(1, 6)]
        assert norms == pytest.approx(ref_norms, rel=1e-4), (r["coords"], norms, ref_norms)
        if 5 in r["eval"]:  # validation through eval_nll, broadcast along the pipe
            assert r["eval"][5] == pytest.approx(single["eval"][5], rel=RTOL), r["coords"]


def _assert_groups(results):
    for r in results:
        assert r["groups"]["ours"] == r["groups"]["deepspeed"], r["coords"]


def test_dp2(single):
    _assert_matches(single, _run(2, EXACT))


def test_tp2(single):
    results = _run(2, [*EXACT, "parallel.tp=2"])
    _assert_matches(single, results)
    _assert_groups(results)


def test_pp2_dp2_with_activation_checkpointing(single):
    results = _run(4, [*EXACT, *EVAL, "parallel.pp=2", "parallel.activation_checkpointing=true"])
    _assert_matches(single, results)
    _assert_groups(results)


def test_tp2_pp2_dp2(single):
    results = _run(8, [*EXACT, *EVAL, "parallel.tp=2", "parallel.pp=2"])
    assert all(5 in r["eval"] for r in results)
    _assert_matches(single, results)
    _assert_groups(results)
    assert sorted(r["coords"] for r in results) == sorted(
        (t, p, d) for t in range(2) for p in range(2) for d in range(2))


def test_bf16_builds_blooms_bf16_optimizer(single):
    """bf16: DeepSpeed's BF16_Optimizer (its lean-step subclass) with fp32 accumulation; losses track fp32 at bf16
    precision."""
    r = _run(1, [*EXACT, *FORCE_BF16, "parallel.activation_checkpointing=true"])[0]
    assert r["optimizer"] == "LeanBF16Optimizer"
    assert r["grad_acc_dtype"] == "torch.float32"
    for i in range(1, 4):
        assert math.isfinite(r["losses"][i])
        assert r["losses"][i] == pytest.approx(single["losses"][i], rel=2e-2)


RAMP = [*EXACT, "schedule.train_iters=null", "schedule.train_samples=40", "schedule.rampup_batch_size=[4, 4, 16]"]


def test_batch_rampup_and_sample_based_length_match_plain_pytorch():
    """tr11's ``start increment samples`` ramp: 4, 4, 4, 4, then 8 until 40 samples (single process and DP2)."""
    ref = plain_pytorch_losses(RAMP)
    for world in (1, 2):
        r = _run(world, RAMP)[0]
        assert list(r["batches"].values()) == [4, 4, 4, 4, 8, 8, 8]
        assert r["position"]["consumed_samples"] == 40
        assert [r["losses"][i] for i in range(1, 8)] == pytest.approx(ref, rel=RTOL)
