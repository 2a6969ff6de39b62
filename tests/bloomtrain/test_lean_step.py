"""The bf16 optimizer step (bloomtrain.bf16_optimizer) against the one it replaced: DeepSpeed's ``BF16_Optimizer``
around torch's AdamW, built here as bloomtrain built it (the oracle), in the same process from the same weights.

Both engines get the same gradients for three steps, through the hook that backward calls (different on each DP
rank; the first and third steps clip), then run the engine's step-boundary instructions (ReduceTiedGrads,
ReduceGrads, OptimizerStep: reduction, norm, clip, update) as ``train_batch`` runs them after the last backward.

- Operators: a ``TorchDispatchMode`` counts the ATen operators (collectives included) one boundary dispatches at
  2 and at 8 layers of the tiny model, bf16, ZeRO-1: the lean step's count does not grow with the parameter
  tensors, and at DP = 1 it runs no collective and no flatten.
- Updates: the norms, the clip and the Adam moments equal DeepSpeed's, the fp32 master weights to fp32 rounding
  (fused vs one-tensor AdamW), on one process and on gloo ranks (DP 2: the in-place all-reduces; TP 2 x PP 2:
  TP duplicates and the tied copy counted once, the tied gradient summed over its stages).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import deepspeed
import pytest
import torch
import torch.distributed as dist
from deepspeed.checkpoint.constants import BASE_OPTIMIZER_STATE
from deepspeed.runtime.pipe import schedule
from torch.utils._python_dispatch import TorchDispatchMode

from bloomtrain.checkpoint.rng import seed_everything
from bloomtrain.config import load_config
from bloomtrain.engine import build_engine, param_groups, skip_cpu_shm_comm_build
from bloomtrain.parallel.pipeline import LossFn, build_pipeline
from bloomtrain.parallel.state import ParallelState
from bloomtrain.train import init_distributed
from tests.bloomtrain.train_helpers import FORCE_BF16, TINY
from tests.harness.gloo_harness import run_distributed

pytestmark = pytest.mark.integration  # tests/tiers.py

BOUNDARY = (schedule.ReduceTiedGrads, schedule.ReduceGrads, schedule.OptimizerStep)
LR = 1e-2  # high enough that three steps move every weight by many ulps
OPTIM = [f"optim.lr={LR}", "optim.clip_grad=1.0", "optim.weight_decay=0.1"]
GRAD_SCALES = (2.0**-7, 2.0**-14, 2.0**-5)  # per step: a global norm of ~2.5, ~0.02, ~10 (clip, no clip, clip)


class OpCounter(TorchDispatchMode):
    """Counts every ATen operator dispatched inside it, by name (``aten::add_``, ``c10d::allreduce_``)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func._schema.name] += 1
        return func(*args, **(kwargs or {}))


def build(overrides: list[str], lean: bool):
    """The engine of the tiny model with ``overrides``: bloomtrain's (``lean``) or the one it replaced."""
    init_distributed()  # DeepSpeed's comm layer on the harness's process group
    cfg = load_config(TINY, [*FORCE_BF16, *OPTIM, *overrides])
    world = dist.get_world_size()
    state = ParallelState.from_sizes(cfg.parallel.tp, cfg.parallel.pp, cfg.dp_size(world))
    seed_everything(cfg.seed + 100 * state.pp_rank)  # the trainer's seeds: the same weights for both engines
    pipeline = build_pipeline(cfg.model, state, partition_method=cfg.parallel.partition_method,
                              activation_checkpointing=False, loss_fn=LossFn(state))
    if lean:
        return build_engine(pipeline, cfg, state, world)
    o = cfg.optim
    optimizer = torch.optim.AdamW(param_groups(pipeline, o.weight_decay), lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps)
    skip_cpu_shm_comm_build()
    engine, _, _, _ = deepspeed.initialize(model=pipeline, optimizer=optimizer, config=cfg.to_deepspeed_config(world))
    return engine


def counted_boundary(engine) -> OpCounter:
    """Make ``engine`` run its step-boundary instructions inside one counter (the engine looks its instruction map up
    on itself, so this engine alone is affected)."""
    counter = OpCounter()
    table = dict(engine._INSTRUCTION_MAP)

    def counted(fn: Callable) -> Callable:
        def run(self, **kwargs):
            with counter:
                return fn(self, **kwargs)
        return run

    engine._INSTRUCTION_MAP = {**table, **{kind: counted(table[kind]) for kind in BOUNDARY}}
    return counter


def feed_step(engine, step: int, scale: float) -> None:
    """One step boundary of ``engine`` after gradients of ``scale`` (seeded by step and rank) reach its fp32
    accumulators through the hook that backward calls."""
    opt = engine.optimizer
    g = torch.Generator().manual_seed(1000 * step + dist.get_rank())
    for i, group in enumerate(opt.bf16_groups):
        for j, param in enumerate(group):
            # +-2^-k: every square and partial sum exact, so both norms agree to their last rounding (DeepSpeed's
            # fp32 per-tensor norms of normal draws err by ~3e-6 on a CPU)
            signs = torch.randint(0, 2, param.shape, generator=g) * 2 - 1
            param.grad = (signs * scale * 2.0 ** -(j % 3)).to(param.dtype)
            opt.accumulate_hp_grads_and_remove_lp(param, i, j)
    for kind in BOUNDARY:
        engine._INSTRUCTION_MAP[kind](engine)


def reload_as_saved_before(engine) -> dict:
    """Load the lean optimizer's state as a checkpoint written before the lean step holds it (AdamW's groups
    unfused), then step once more: which AdamW ran, and where its step counts are."""
    opt = engine.optimizer
    saved = opt.state_dict()
    for group in saved[BASE_OPTIMIZER_STATE]["param_groups"]:
        group.update(fused=None, foreach=None)
    opt.load_state_dict([saved] * dist.get_world_size(), load_optimizer_states=True)
    counter = counted_boundary(engine)
    feed_step(engine, len(GRAD_SCALES), GRAD_SCALES[0])
    partitions = opt.fp32_groups_flat_partition
    steps = [opt.optimizer.state[p]["step"] for p in partitions]
    return {"fused": [g["fused"] for g in opt.optimizer.param_groups], "ops": dict(counter.ops),
            "steps": [(float(s), s.dtype, s.device == p.device) for s, p in zip(steps, partitions, strict=True)]}


def fed_steps(overrides: list[str]) -> dict:
    """Both engines, the same weights, the same gradients for three steps; then the lean one reloaded."""
    engines = {"deepspeed": build(overrides, False), "lean": build(overrides, True)}
    out: dict = {name: {"norms": []} for name in engines}
    for name, engine in engines.items():
        opt = engine.optimizer
        counter = counted_boundary(engine)
        for step, scale in enumerate(GRAD_SCALES):
            counter.ops.clear()
            feed_step(engine, step, scale)
            out[name]["norms"].append(float(engine.get_global_grad_norm()))
        out[name]["ops"] = dict(counter.ops)  # the last step's
        out[name]["master"] = [p.detach().clone() for p in opt.fp32_groups_flat_partition]
        out[name]["moments"] = [opt.optimizer.state[p][k].clone() for p in opt.fp32_groups_flat_partition
                                for k in ("exp_avg", "exp_avg_sq")]
        out[name]["weights"] = [p.detach().float().clone() for p in engine.module.parameters()]
        out[name]["applied"] = engine.was_step_applied()
    out["lean"]["reloaded"] = reload_as_saved_before(engines["lean"])
    return out


def check_equal_updates(out: dict) -> None:
    ds, lean = out["deepspeed"], out["lean"]
    assert lean["applied"] and ds["applied"]
    assert lean["norms"] == pytest.approx(ds["norms"], rel=1e-6)
    assert ds["norms"][0] > 1.0 > ds["norms"][1]  # clipped, then not
    # fused vs one-tensor AdamW: each master weight within ~2 ulps of itself or 4 roundings of an update (LR)
    for got, ref in zip(lean["master"], ds["master"], strict=True):
        torch.testing.assert_close(got, ref, rtol=2**-22, atol=LR * 2**-21)
    for got, ref in zip(lean["moments"], ds["moments"], strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-6, atol=0.0)
    # bf16 weights: at most one bf16 ulp apart (masters a rounding apart may round to neighbours)
    for got, ref in zip(lean["weights"], ds["weights"], strict=True):
        torch.testing.assert_close(got, ref, rtol=2**-7, atol=1e-9)


def one_process() -> dict[int, dict]:
    return {layers: fed_steps([f"model.num_layers={layers}"]) for layers in (2, 8)}


@pytest.fixture(scope="module")
def single() -> dict[int, dict]:
    """2 and 8 layers (29 and 101 parameter tensors), one process."""
    return run_distributed(one_process, 1, timeout_s=300)[0]


def test_the_step_dispatches_a_fixed_number_of_operators(single):
    """The third (clipped) step's boundary: DeepSpeed's operators grow with the tensors, the lean step's do not;
    at DP = 1 it dispatches no collective and no flatten (``cat``)."""
    ops = {layers: {name: single[layers][name]["ops"] for name in ("deepspeed", "lean")} for layers in (2, 8)}
    print({layers: {name: sum(c.values()) for name, c in v.items()} for layers, v in ops.items()})
    assert ops[2]["lean"] == ops[8]["lean"], ops
    assert sum(ops[8]["deepspeed"].values()) > sum(ops[2]["deepspeed"].values()) + 200  # the oracle does grow
    assert sum(ops[2]["lean"].values()) < 40, ops[2]["lean"]
    assert not [op for op in ops[2]["lean"] if op.startswith("c10d::") or op == "aten::cat"], ops[2]["lean"]
    assert ops[2]["lean"]["aten::_fused_adamw_"] == 2  # torch's fused AdamW, once per group (CPU here, CUDA there)


def test_updates_equal_deepspeeds_on_one_process(single):
    check_equal_updates(single[2])
    check_equal_updates(single[8])


def test_an_optimizer_state_saved_unfused_loads_back_into_the_fused_kernel(single):
    reloaded = single[2]["lean"]["reloaded"]
    assert reloaded["fused"] == [True, True]
    assert reloaded["ops"].get("aten::_fused_adamw_") == 2, reloaded["ops"]
    assert reloaded["steps"] == [(4.0, torch.float32, True)] * 2


def test_updates_equal_deepspeeds_on_dp2():
    """Each rank's gradients differ; the lean step all-reduces each group buffer in place (two all-reduces, no
    flatten)."""
    for out in run_distributed(fed_steps, 2, ["parallel.tp=1"], timeout_s=300):
        check_equal_updates(out)
        ops = out["lean"]["ops"]
        assert ops.get("c10d::allreduce_") == 2 and "aten::cat" not in ops, ops


def test_updates_equal_deepspeeds_on_tp2_pp2():
    """TP rank 1 counts only sharded tensors, the last stage not the tied copy: the norm (all-reduced over the
    model-parallel group of four) and the updates equal DeepSpeed's on every rank."""
    for out in run_distributed(fed_steps, 4, ["parallel.tp=2", "parallel.pp=2"], timeout_s=300):
        check_equal_updates(out)
