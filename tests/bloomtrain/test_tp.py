"""Tensor parallelism on CPU/gloo: TP in {1, 2, 4} equals the unsharded model (fp32, relative 1e-5), with attention
dropout too (its masks are keyed by the global head).

Each rank builds the TP model and, from the same config and seed, the TP=1 reference; it checks that the
shards are slices of the reference (TP-invariant init), then compares gathered logits, the loss and every
gathered parameter gradient, and that TP-duplicated parameters get the same gradient on every rank.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from bloomtrain.model.bloom import BloomModel
from bloomtrain.model.config import ModelConfig
from bloomtrain.parallel.cross_entropy import vocab_parallel_cross_entropy
from bloomtrain.parallel.layers import is_sharded, sync_duplicated_grads
from bloomtrain.parallel.mappings import gather_from_tp
from bloomtrain.parallel.state import ParallelState
from tests.harness.gloo_harness import run_distributed

pytestmark = pytest.mark.integration  # tests/tiers.py

RTOL = 1e-5


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def gather_dim(t: torch.Tensor, dim: int, state: ParallelState) -> torch.Tensor:
    parts = [torch.empty_like(t) for _ in range(state.tp_size)]
    dist.all_gather(parts, t.contiguous(), group=state.tp_group)
    return torch.cat(parts, dim=dim)


def _tp_parity(num_heads: int, attention_dropout: float = 0.0) -> dict[str, float]:
    state = ParallelState.from_sizes(tp_size=dist.get_world_size())
    config = ModelConfig.tiny(num_heads=num_heads, num_layers=2, attention_dropout=attention_dropout)
    ref, model = BloomModel(config), BloomModel(config, state)
    ref_params = dict(ref.named_parameters())

    for name, p in model.named_parameters():  # TP-invariant init: shards are slices of the TP=1 draw
        full = gather_dim(p.detach(), p.partition_dim, state) if is_sharded(p) else p.detach()
        assert torch.equal(full, ref_params[name]), f"{name}: init is not TP-invariant"

    g = torch.Generator().manual_seed(7)
    ids = torch.randint(0, config.vocab_size, (3, 10), generator=g)
    mask = torch.ones(3, 10, dtype=torch.long)
    mask[1, 7:] = 0
    mask[2, :4] = 0
    labels = torch.roll(ids, -1, dims=1)

    # Every TP rank draws the dropout seeds the TP 1 model draws (same generator state); the masks are keyed by
    # the global head (bloomtrain.kernels.dropout_mask), so each rank drops what TP 1 drops for its heads.
    torch.manual_seed(11)
    logits = model(ids, mask)
    torch.manual_seed(11)
    ref_logits = ref(ids, mask)
    loss, ref_loss = model.loss(logits, labels, mask), ref.loss(ref_logits, labels, mask)
    loss.backward()
    ref_loss.backward()
    errors = {"logits": rel_err(model.gather_logits(logits), ref_logits), "loss": rel_err(loss, ref_loss)}

    for name, p in model.named_parameters():
        ref_grad = ref_params[name].grad
        if is_sharded(p):
            errors[name] = rel_err(gather_dim(p.grad, p.partition_dim, state), ref_grad)
        else:
            errors[name] = rel_err(p.grad, ref_grad)
            copies = gather_dim(p.grad.unsqueeze(0), 0, state)  # duplicated: same gradient on every rank
            errors[f"{name} (across TP)"] = rel_err(copies, p.grad.expand_as(copies))
    sync_duplicated_grads(model, state)
    for name, p in model.named_parameters():
        if not is_sharded(p):
            copies = gather_dim(p.grad.unsqueeze(0), 0, state)
            assert torch.equal(copies, p.grad.expand_as(copies)), f"{name}: duplicated grads differ after sync"
    return errors


# 3 heads per rank at TP 2 and 4; attention dropout on at TP 2
@pytest.mark.parametrize(("tp", "num_heads", "attention_dropout"), [(1, 12, 0.0), (2, 6, 0.0), (4, 12, 0.0),
                                                                    (2, 6, 0.3)])
def test_tp_model_equals_unsharded(tp, num_heads, attention_dropout):
    errors = run_distributed(_tp_parity, tp, num_heads, attention_dropout)
    for rank_errors in errors:
        bad = {k: v for k, v in rank_errors.items() if not v <= RTOL}
        assert not bad, f"relative error above {RTOL}: {bad}"
    assert len(errors[0]) > 20  # logits, loss and every parameter were compared


def _cross_entropy_parity() -> None:
    state = ParallelState.from_sizes(tp_size=dist.get_world_size())
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 5, 64, generator=g) * 3
    target = torch.randint(0, 64, (4, 5), generator=g)
    grad_out = torch.rand(4, 5, generator=g)

    full = logits.clone().requires_grad_()
    ref = F.cross_entropy(full.view(-1, 64), target.view(-1), reduction="none").view(4, 5)
    (ref * grad_out).sum().backward()

    local = logits.chunk(state.tp_size, dim=-1)[state.tp_rank].clone().requires_grad_()
    before = local.detach().clone()
    loss = vocab_parallel_cross_entropy(local, target, state)
    (loss * grad_out).sum().backward()
    torch.testing.assert_close(loss, ref.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(gather_from_tp(local.grad, state), full.grad, rtol=1e-6, atol=1e-7)
    assert torch.equal(local.detach(), before)  # input not modified in place


@pytest.mark.parametrize("tp", [1, 2])
def test_vocab_parallel_cross_entropy_equals_torch(tp):
    run_distributed(_cross_entropy_parity, tp)


def _grid_layout() -> list[int]:
    state = ParallelState.from_sizes(tp_size=2, pp_size=2)  # world 8: dp = 2
    rank = dist.get_rank()
    assert rank == ParallelState.global_rank(state.tp_rank, state.pp_rank, state.dp_rank, 2, 2)
    out = []
    for group in (state.tp_group, state.dp_group, state.pp_group, state.model_group):
        members = [torch.zeros(1, dtype=torch.long) for _ in range(dist.get_world_size(group))]
        dist.all_gather(members, torch.tensor([rank]), group=group)
        out.append(sorted(int(m) for m in members))
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

    topo_state = ParallelState.from_topology(PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2))
    coords = ("tp_rank", "pp_rank", "dp_rank", "tp_size", "pp_size", "dp_size")
    assert [getattr(topo_state, c) for c in coords] == [getattr(state, c) for c in coords]
    return [state.get_model_parallel_rank(), *[tuple(g) for g in out]]


def test_parallel_state_follows_deepspeed_rank_order():
    # global_rank = (pp * DP + dp) * TP + tp, as in DeepSpeed's PipeModelDataParallelTopology.
    results = run_distributed(_grid_layout, 8)
    rank5 = results[5]  # pp 1, dp 0, tp 1
    assert rank5 == [3, (4, 5), (5, 7), (1, 5), (0, 1, 4, 5)]
    from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

    topo = PipeModelDataParallelTopology(num_pp=2, num_mp=2, num_dp=2)
    for r, res in enumerate(results):
        for axis, members in zip(("model", "data", "pipe"), res[1:4]):
            expected = next(g for g in topo.get_axis_comm_lists(axis) if r in g)
            assert members == tuple(expected), (r, axis)
