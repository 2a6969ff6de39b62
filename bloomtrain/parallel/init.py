"""TP-invariant, PP-invariant parameter initialisation.

Every parameter is drawn as if it were unsharded, from a generator seeded by (base seed, the parameter's
global name), and each rank keeps its slice. The same base seed therefore gives the same model at any TP
or PP degree, unlike Megatron's default GPU init (one independent draw per shard, seed + 2718 + tp_rank;
docs/bloom-training.md, "Tensor-parallel initialisation").

To avoid materialising a full 250880 x 14336 embedding on every rank, the unsharded tensor, viewed as
``[rows, cols]``, is generated in fixed blocks of rows, each from its own seed; the block size depends only
on the full shape, so a rank generates just the blocks overlapping its rows (partition dim 0) or every
block one at a time, keeping its columns (partition dim 1). Peak extra memory is one block (16 MiB fp32).
"""

from __future__ import annotations

import hashlib
import math

import torch

from bloomtrain.parallel.state import ParallelState

_BLOCK_ELEMENTS = 1 << 22  # fp32 elements generated per draw (16 MiB)


def param_seed(base_seed: int, name: str, block: int = 0) -> int:
    """A 63-bit seed from (base seed, global parameter name, row block); stable across runs and machines."""
    digest = hashlib.sha256(f"{base_seed}/{name}/{block}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def full_shape(param: torch.Tensor, state: ParallelState) -> tuple[int, ...]:
    """The unsharded shape of a parameter marked with ``partition_dim`` (None = TP-duplicated)."""
    shape = list(param.shape)
    dim = getattr(param, "partition_dim", None)
    if dim is not None:
        shape[dim] *= state.tp_size
    return tuple(shape)


def normal_slice(
    shape: tuple[int, ...],
    std: float,
    base_seed: int,
    name: str,
    partition_dim: int | None,
    state: ParallelState,
) -> torch.Tensor:
    """This rank's slice (fp32, CPU) of an N(0, std) tensor of ``shape`` that does not depend on TP."""
    rows = shape[0]
    cols = math.prod(shape[1:])
    block_rows = max(1, _BLOCK_ELEMENTS // max(cols, 1))
    if partition_dim is not None and partition_dim > 1:
        raise ValueError(f"{name}: partition_dim {partition_dim} is not supported (0 or 1 only)")
    row_lo, row_hi, col_lo, col_hi = 0, rows, 0, cols
    if partition_dim == 0:
        per = rows // state.tp_size
        row_lo, row_hi = state.tp_rank * per, (state.tp_rank + 1) * per
    elif partition_dim == 1:
        if len(shape) != 2:
            raise ValueError(f"{name}: partition_dim 1 needs a 2-D tensor, got shape {shape}")
        per = cols // state.tp_size
        col_lo, col_hi = state.tp_rank * per, (state.tp_rank + 1) * per
    pieces = []
    for block in range(row_lo // block_rows, (row_hi - 1) // block_rows + 1):
        start = block * block_rows
        n = min(block_rows, rows - start)
        gen = torch.Generator().manual_seed(param_seed(base_seed, name, block))
        values = torch.empty(n, cols).normal_(0.0, std, generator=gen)
        lo, hi = max(row_lo, start) - start, min(row_hi, start + n) - start
        pieces.append(values[lo:hi, col_lo:col_hi])
    out_shape = list(shape)
    if partition_dim is not None:
        out_shape[partition_dim] //= state.tp_size
    return torch.cat(pieces).reshape(out_shape)


@torch.no_grad()
def init_normal_(param: torch.Tensor, std: float, base_seed: int, name: str, state: ParallelState) -> None:
    """Fill ``param`` (a shard or a duplicated tensor) with its slice of the TP-invariant normal draw."""
    dim = getattr(param, "partition_dim", None)
    values = normal_slice(full_shape(param, state), std, base_seed, name, dim, state)
    param.copy_(values.to(device=param.device, dtype=param.dtype))
