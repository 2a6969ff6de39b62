"""Shared pieces of the trainer tests: the tiny run config and a rank function for tests/harness/gloo_harness.py."""

from __future__ import annotations

import json
from pathlib import Path

import torch.distributed as dist

from bloomtrain.metrics import START_EVENT

TINY = Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny-cpu.yaml"

# fp32, a high LR and an active clip so that 5 steps move the weights visibly; warmup makes step 1 lr 0.
EXACT = [
    "optim.precision=fp32", "optim.lr=1e-2", "optim.min_lr=1e-3", "optim.clip_grad=0.5",
    "schedule.micro_batch_size=2", "schedule.global_batch_size=8", "schedule.train_iters=5",
    "schedule.warmup_samples=8", "schedule.decay_samples=64", "logging.eval_interval=0",
]

# bf16 on any CPU: the tests of DeepSpeed's BF16 path (BF16_Optimizer, ZeRO-1, universal checkpoints) keep it where
# a CPU without native bf16 would otherwise train fp32 (bloomtrain.precision).
FORCE_BF16 = ["optim.precision=bf16", "optim.force_bf16=true"]


def train_rank(overrides: list[str], faults=None, callbacks=None) -> dict:
    """Build the trainer from tiny-cpu.yaml + overrides, resume if possible, train; report what tests need.

    ``faults``: the Checkpointer's fault hook (checkpoint.checkpointer.FaultHook). ``callbacks``: a function
    returning extra callbacks (built in the rank); their ``recorded`` attributes come back in ``"recorded"``."""
    from bloomtrain.config import load_config
    from bloomtrain.train import build_trainer

    cfg = load_config(TINY, overrides)
    extra = callbacks() if callbacks is not None else []
    trainer = build_trainer(cfg, callbacks=extra, faults=faults)
    error = None
    try:
        result = trainer.fit()
    except Exception as exc:  # noqa: BLE001 - reported to the test
        error, result = f"{type(exc).__name__}: {exc}", None
    engine, state = trainer.module.engine, trainer.state
    topo = engine.module._topo
    rank = dist.get_rank()

    def mine(axis: str) -> list[int]:
        return next(g for g in topo.get_axis_comm_lists(axis) if rank in g)

    groups = {
        "ours": {name: sorted(dist.get_process_group_ranks(g)) if g is not None else [rank]
                 for name, g in (("tp", state.tp_group), ("dp", state.dp_group), ("pp", state.pp_group))},
        "deepspeed": {"tp": mine("model"), "dp": mine("data"), "pp": mine("pipe")},
    }
    opt = engine.optimizer
    return {
        "losses": result.losses if result else {},
        "eval": result.eval_losses if result else {},
        "grad_norms": result.grad_norms if result else {},
        "batches": result.global_batches if result else {},
        "position": result.position.as_dict() if result else None,
        "error": error,
        "optimizer": type(opt).__name__,
        "grad_acc_dtype": str(getattr(opt, "grad_acc_dtype", None)),
        "skipped_steps": trainer.module.skipped_steps,
        "groups": groups,
        "coords": (state.tp_rank, state.pp_rank, state.dp_rank),
        "recorded": [getattr(cb, "recorded", None) for cb in extra],
    }


def losses_by_start(log_dir: Path) -> tuple[dict[int, float], list[list[int]]]:
    """From ``log_dir/metrics.jsonl``: the loss per iteration (the last record of an iteration wins: a restart
    redoes the iterations after its checkpoint) and the iterations each process start logged, in order."""
    losses: dict[int, float] = {}
    starts: list[list[int]] = []
    for line in (log_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("event") == START_EVENT:  # the header every start writes (with its precision)
            starts.append([])
        elif "loss" in rec:
            losses[rec["iteration"]] = rec["loss"]
            starts[-1].append(rec["iteration"])
    return losses, starts
