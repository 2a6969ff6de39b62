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
torch.distributed. The collectives are PyTorch's functional ones (``torch.ops._c10d_functional``: out of place,
then an explicit wait), so torch.compile traces them: a compiled block under TP is one graph forward and one
backward with its all-reduces inside (bloomtrain.model.compiled), and eager runs make the same calls. Each mapping
is an autograd.Function whose backward is written out, so the pairs above hold exactly (the functional ops' own
autograd, an all-reduce's backward being an all-reduce, is never used). Inputs are never modified in place.
"""

from __future__ import annotations

import torch

from bloomtrain.parallel.state import ParallelState

_c10d = torch.ops._c10d_functional


def _group_name(state: ParallelState) -> str:
    if state.tp_group is None:
        raise RuntimeError(
            f"tensor parallelism of size {state.tp_size} needs a process group; this ParallelState was built "
            "offline (build it with ParallelState.from_sizes inside an initialised process group)"
        )
    return state.tp_group.group_name


def _all_reduce(x: torch.Tensor, group: str) -> torch.Tensor:
    return _c10d.wait_tensor(_c10d.all_reduce(x.contiguous(), "sum", group))


def _split_last(x: torch.Tensor, rank: int, size: int) -> torch.Tensor:
    if x.shape[-1] % size:
        raise ValueError(f"last dim {x.shape[-1]} is not divisible by tensor-parallel size {size}")
    return x.chunk(size, dim=-1)[rank].contiguous()


def _gather_last(x: torch.Tensor, size: int, group: str) -> torch.Tensor:
    stacked = _c10d.wait_tensor(_c10d.all_gather_into_tensor(x.contiguous(), size, group))  # ranks along dim 0
    return torch.cat(stacked.chunk(size, dim=0), dim=-1)


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group: str):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_reduce(grad, ctx.group), None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group: str):
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _ScatterToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group: str, rank: int, size: int):
        ctx.group, ctx.size = group, size
        return _split_last(x, rank, size)

    @staticmethod
    def backward(ctx, grad):
        return _gather_last(grad, ctx.size, ctx.group), None, None, None


class _GatherFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group: str, rank: int, size: int):
        ctx.rank, ctx.size = rank, size
        return _gather_last(x, size, group)

    @staticmethod
    def backward(ctx, grad):
        return _split_last(grad, ctx.rank, ctx.size), None, None, None


def copy_to_tp(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    return x if state.tp_size == 1 else _CopyToTP.apply(x, _group_name(state))


def reduce_from_tp(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    return x if state.tp_size == 1 else _ReduceFromTP.apply(x, _group_name(state))


def scatter_to_tp(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    if state.tp_size == 1:
        return x
    return _ScatterToTP.apply(x, _group_name(state), state.tp_rank, state.tp_size)


def gather_from_tp(x: torch.Tensor, state: ParallelState) -> torch.Tensor:
    if state.tp_size == 1:
        return x
    return _GatherFromTP.apply(x, _group_name(state), state.tp_rank, state.tp_size)
