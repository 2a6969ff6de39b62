"""Megatron's tensor-parallel layers, taking an explicit ``ParallelState``.

Sharded parameters carry ``tensor_model_parallel = True`` (the attribute DeepSpeed checks to count a
parameter once per TP slice in gradient norms) and ``partition_dim`` (the sharded dim, used by the init,
the checkpoint merge and the tests). Parameters without ``partition_dim`` are TP-duplicated: every TP rank
holds the full tensor and sees the same gradient (``sync_duplicated_grads`` averages it anyway, so fp
rounding cannot make the copies drift as they did in BLOOM's run; docs/bloom-training.md, "TP-duplicated
parameters").

Weights are created empty: the owner initialises them (bloomtrain.parallel.init) from global names.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from bloomdata.errors import BloomstackError
from bloomtrain.parallel.mappings import copy_to_tp, gather_from_tp, reduce_from_tp, scatter_to_tp
from bloomtrain.parallel.state import ParallelState


def divide(numerator: int, denominator: int, what: str) -> int:
    if numerator % denominator:
        raise ValueError(f"{what}={numerator} is not divisible by tensor-parallel size {denominator}")
    return numerator // denominator


def mark_sharded(param: nn.Parameter, dim: int) -> nn.Parameter:
    # Megatron's attributes on a sharded parameter (read by DeepSpeed's universal checkpoint code)
    param.tensor_model_parallel = True  # type: ignore[attr-defined]
    param.partition_dim = dim  # type: ignore[attr-defined]
    param.partition_stride = 1  # type: ignore[attr-defined]
    return param


def is_sharded(param: torch.Tensor) -> bool:
    return getattr(param, "partition_dim", None) is not None


def _empty(*shape: int, dtype: torch.dtype | None, device: torch.device | str | None) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape, dtype=dtype, device=device))


class ColumnParallelLinear(nn.Module):
    """``Y = X A^T + b`` with A split by output rows: weight ``[out / TP, in]``, bias ``[out / TP]``.

    The input is replicated (``copy_to_tp``: its gradient is all-reduced); the output stays sharded on the
    last dim unless ``gather_output``. ``skip_bias_add`` returns ``(y, bias)`` so the caller can fuse it.
    """

    def __init__(self, in_features: int, out_features: int, state: ParallelState, *, bias: bool = True,
                 gather_output: bool = False, skip_bias_add: bool = False,
                 dtype: torch.dtype | None = None, device=None) -> None:
        super().__init__()
        self.state, self.gather_output, self.skip_bias_add = state, gather_output, skip_bias_add
        local = divide(out_features, state.tp_size, "out_features")
        self.weight = mark_sharded(_empty(local, in_features, dtype=dtype, device=device), 0)
        self.bias = mark_sharded(_empty(local, dtype=dtype, device=device), 0) if bias else None

    def forward(self, x: torch.Tensor):
        x = copy_to_tp(x, self.state)
        bias = self.bias if not self.skip_bias_add else None
        y = F.linear(x, self.weight, bias)
        if self.gather_output:
            y = gather_from_tp(y, self.state)
        return (y, self.bias) if self.skip_bias_add else y


class RowParallelLinear(nn.Module):
    """``Y = X A^T + b`` with A split by input columns: weight ``[out, in / TP]``, full (duplicated) bias.

    The partial products are summed with ``reduce_from_tp`` and the bias is added once, after the sum.
    """

    def __init__(self, in_features: int, out_features: int, state: ParallelState, *, bias: bool = True,
                 input_is_parallel: bool = True, skip_bias_add: bool = False,
                 dtype: torch.dtype | None = None, device=None) -> None:
        super().__init__()
        self.state, self.input_is_parallel, self.skip_bias_add = state, input_is_parallel, skip_bias_add
        local = divide(in_features, state.tp_size, "in_features")
        self.weight = mark_sharded(_empty(out_features, local, dtype=dtype, device=device), 1)
        self.bias = _empty(out_features, dtype=dtype, device=device) if bias else None

    def forward(self, x: torch.Tensor):
        if not self.input_is_parallel:
            x = scatter_to_tp(x, self.state)
        y = reduce_from_tp(F.linear(x, self.weight), self.state)
        if self.skip_bias_add:
            return y, self.bias
        return y if self.bias is None else y + self.bias


def check_token_range(ids: torch.Tensor, vocab_rows: int) -> None:
    """Raise when a token id is outside ``[0, vocab_rows)``. Meant for host tensors: on a device tensor the
    min/max would make the host wait for the device."""
    if not ids.numel():
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_rows:
        raise BloomstackError(f"token id out of range [0, {vocab_rows}): min {low}, max {high}; the data was "
                              "tokenized with a larger vocabulary than the model config")


class VocabParallelEmbedding(nn.Module):
    """Embedding with contiguous row blocks per rank: rank r owns ids ``[r V/TP, (r+1) V/TP)``.

    Ids outside the local block look up row 0 and are zeroed; the all-reduce then assembles the full
    embedding on every rank. Out-of-range ids (>= V) raise instead of silently embedding to zero: checked here
    for ids on the CPU, on the host before the copy for the trainer's batches (``check_token_range``).

    ``sparse_grad``: the lookup's gradient is a sparse ``[V/TP, h]`` tensor holding only the rows of the
    batch's tokens, instead of a dense one (a zero fill plus a scatter over the whole table: 1 GB per
    step for BLOOM's 250,880 x 1024 at fp32). Only for a table whose weight also gets a dense gradient
    in the same backward (the tied LM head, which runs later in the forward and so earlier in the
    backward): autograd then adds the sparse rows into that dense gradient in place and ``.grad`` ends
    up dense. A table with no other use would be left with a sparse ``.grad``, which optimizers and
    DeepSpeed's all-reduces do not take, so the default is off.
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, state: ParallelState, *,
                 sparse_grad: bool = False, dtype: torch.dtype | None = None, device=None) -> None:
        super().__init__()
        self.state, self.num_embeddings, self.sparse_grad = state, num_embeddings, sparse_grad
        local = divide(num_embeddings, state.tp_size, "num_embeddings (padded vocab)")
        self.vocab_start, self.vocab_end = state.tp_rank * local, (state.tp_rank + 1) * local
        self.weight = mark_sharded(_empty(local, embedding_dim, dtype=dtype, device=device), 0)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.device.type == "cpu":  # on a device the check would wait for it: training checks on the host
            check_token_range(ids, self.num_embeddings)  # (bloomtrain.data.to_device)
        if self.state.tp_size == 1:
            return F.embedding(ids, self.weight, sparse=self.sparse_grad)
        outside = (ids < self.vocab_start) | (ids >= self.vocab_end)
        local_ids = (ids - self.vocab_start).masked_fill(outside, 0)
        out = F.embedding(local_ids, self.weight, sparse=self.sparse_grad).masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tp(out, self.state)


@torch.no_grad()
def sync_duplicated_grads(module: nn.Module, state: ParallelState) -> None:
    """Average the gradients of TP-duplicated parameters over the TP group (after backward)."""
    if state.tp_size == 1:
        return
    for param in module.parameters():
        if not is_sharded(param) and param.grad is not None:
            dist.all_reduce(param.grad, group=state.tp_group)
            param.grad.div_(state.tp_size)
