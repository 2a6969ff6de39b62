"""The four conjugate autograd mappings of Megatron tensor parallelism, with an explicit group.

=====================  =========================  ===========================
function               forward                    backward
=====================  =========================  ===========================
copy_to_tp             identity                   all-reduce (sum) over TP
reduce_from_tp         all-reduce (sum) over TP   identity
scatter_to_tp          keep this rank's last-dim  all-gather along last dim
gather_from_tp         all-gather along last dim  keep this rank's slice
=====================  =========================  ===========================

Every function is the identity when ``state.tp_size == 1``, so a single-process model never touches
torch.distributed. Collectives work on copies: inputs are never modified in place (clarity over the few
MB Megatron saves by reducing in place).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from bloomtrain.parallel.state import ParallelState


def _group(state: ParallelState):
    if state.tp_group is None:
        raise RuntimeError(
            f"tensor parallelism of size {state.tp_size} needs a process group; this ParallelState was built "
            "offline (build it with ParallelState.from_sizes inside an initialised process group)"
        )
    return state.tp_group


def _all_reduce(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    out = x.contiguous().clone()
    dist.all_reduce(out, group=_group(state))
    return out


def _split_last(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    size = x.shape[-1]
    if size % state.tp_size:
        raise ValueError(f"last dim {size} is not divisible by tensor-parallel size {state.tp_size}")
    return x.chunk(state.tp_size, dim=-1)[state.tp_rank].contiguous()


def _gather_last(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    x = x.contiguous()
    parts = [torch.empty_like(x) for _ in range(state.tp_size)]
    dist.all_gather(parts, x, group=_group(state))
    return torch.cat(parts, dim=-1)


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, state):
        ctx.state = state
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.state), None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, state):
        return _all_reduce(x, state)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _ScatterToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, state):
        ctx.state = state
        return _split_last(x, state)

    @staticmethod
    def backward(ctx, grad):
        return _gather_last(grad, ctx.state), None


class _GatherFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, state):
        ctx.state = state
        return _gather_last(x, state)

    @staticmethod
    def backward(ctx, grad):
        return _split_last(grad, ctx.state), None


@torch.compiler.disable
def _collective(mapping: type[torch.autograd.Function], x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    """Run a mapping eagerly: inside a compiled block (model.compile) each collective is a graph break, and the
    math between them compiles (torch.compile does not trace our process groups)."""
    return mapping.apply(x, state)


def copy_to_tp(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    return x if state.tp_size == 1 else _collective(_CopyToTP, x, state)


def reduce_from_tp(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    return x if state.tp_size == 1 else _collective(_ReduceFromTP, x, state)


def scatter_to_tp(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    return x if state.tp_size == 1 else _collective(_ScatterToTP, x, state)


def gather_from_tp(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    return x if state.tp_size == 1 else _collective(_GatherFromTP, x, state)
