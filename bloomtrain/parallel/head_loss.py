"""The LM head and its loss as one chunked op: final hidden states -> logits -> vocab-parallel cross entropy.

Why: the unfused step (``F.linear`` then ``masked_mean_loss``) materialises the logits of every token
``[tokens, V/TP]`` in the model dtype, their fp32 copy, the fp32 softmax kept for backward, and the pipeline
engine keeps the logits as the last stage's output: 17 GB of RSS for 4,096 tokens at V = 250,880 on CPU, and
on a GPU ~12 GiB for one bloom-560m micro-batch of 8,192 tokens. Here the tokens go through the head ``rows``
at a time, and a chunk's logits live only while its loss and gradients are computed. The gradients are
computed in the forward (the idea of Liger-Kernel's fused linear cross entropy): the loss ends the graph, so its
gradient is known up to the one scalar the backward brings (DeepSpeed's 1 / accumulation steps, LossFn's
non-finite guard). Kept from forward to backward: the gradients of the hidden states ``[tokens, h]`` (model
dtype) and of the weight ``[V/TP, h]`` (fp32 accumulator).

Maths per chunk, this rank owning the vocabulary rows ``[start, start + V/TP)`` (Megatron's vocab-parallel
cross entropy, as bloomtrain.parallel.cross_entropy; r a token, v a vocabulary row, t_r its target)::

    z = h W^T                       the chunk's logits in the model dtype, as F.linear makes them
    m_r = max_v z_rv                all-reduce MAX over TP
    s_r = sum_v exp(z_rv - m_r)     all-reduce SUM over TP, in one call with the target logit z_r,t
    loss_r = log s_r - (z_r,t - m_r)
    G = (exp(z - m) / s - onehot(t)) * w_r      fp32, rounded once to the model dtype
    grad h = G W,   grad W += G^T h             w_r = mask_r / sum(mask): the masked mean's gradient

and the loss is ``sum_r loss_r mask_r / sum_r mask_r`` in fp32, as ``masked_mean_loss`` computes it.

Precision. fp32: the unfused path's operations, equal to it within 1e-6 (tests/bloomtrain/test_head_loss.py).
bf16: the logits, their fp32 softmax and G (rounded once to bf16 for the GEMMs) are the unfused path's values;
grad W differs only in where it is rounded. The unfused path rounds the sum over all tokens to bf16 once, in
its GEMM; here each chunk's sum goes into an fp32 accumulator (computed in fp32 by the GEMM where
``torch.addmm`` takes ``out_dtype``, CUDA; elsewhere the chunk's sum is rounded to bf16 first), which is
scaled by the backward's scalar and rounded to bf16 once. The scalar multiplies G before its rounding in the
unfused path and the fp32 sum here: both round a product once. An fp16 weight with gradients takes the unfused
path: G before the backward's loss scale would underflow fp16 (fp16 is not a training precision here).

Chunks (``chunk_rows``): one chunk's logits are bounded to ``CHUNK_BYTES`` of fp32 ``[rows, V/TP]``. CUDA: 4
GiB, 4,096 tokens at V = 250,880 (two chunks per bloom-560m micro-batch): a chunk adds one read and write of the
fp32 grad-W accumulator (2 GB at bloom-560m) to 6 rows h V FLOPs of GEMMs, ~7% of the card's bandwidth while
they run; smaller chunks would make that traffic the bottleneck (Liger's rows ~ tokens h / V: 64 here, 64
times the traffic). Elsewhere (CPU) 256 MiB: memory binds, not bandwidth. On CUDA the elementwise passes (row
max, sum of exponentials, softmax gradient) run ``torch.compile``'d: Inductor makes each one kernel over the
bf16 logits, no fp32 ``[rows, V/TP]`` tensor, about 8 bytes of traffic per logit in all against ~50 in eager.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bloomtrain.parallel.cross_entropy import masked_mean_loss
from bloomtrain.parallel.mappings import copy_to_tp
from bloomtrain.parallel.state import ParallelState

CHUNK_BYTES = {"cuda": 4 << 30}
"""One chunk's logits counted as fp32 ``[rows, V/TP]``, bytes by device type (others: ``OTHER_CHUNK_BYTES``)."""
OTHER_CHUNK_BYTES = 256 << 20


def chunk_rows(tokens: int, local_vocab: int, device: torch.device) -> int:
    """Tokens per chunk: at most the budget of ``device``'s type over one fp32 row of logits (a multiple of 128,
    whole GEMM tiles, when at least 128), and the tokens split into equal chunks under it (one compiled shape)."""
    most = max(1, CHUNK_BYTES.get(device.type, OTHER_CHUNK_BYTES) // (4 * local_vocab))
    if most >= 128:
        most -= most % 128
    chunks = -(-tokens // most)
    return max(1, -(-tokens // chunks))


# --- the elementwise passes over one chunk's logits [rows, V/TP] (compiled on CUDA) -----------------------


def _row_max(logits: torch.Tensor) -> torch.Tensor:
    return logits.amax(dim=-1).float()


def _sum_exp(logits: torch.Tensor, row_max: torch.Tensor) -> torch.Tensor:
    return (logits.float() - row_max.unsqueeze(-1)).exp_().sum(dim=-1)


def _softmax_grad(logits: torch.Tensor, row_max: torch.Tensor, sum_exp: torch.Tensor,
                  scale: torch.Tensor) -> torch.Tensor:
    """``exp(z - m) / s * scale`` in the logits' dtype; the target entries are set afterwards (``_chunk``)."""
    probs = (logits.float() - row_max.unsqueeze(-1)).exp_().div_(sum_exp.unsqueeze(-1))
    return probs.mul_(scale.unsqueeze(-1)).to(logits.dtype)


@dataclass(frozen=True)
class Passes:
    row_max: Callable[..., torch.Tensor]
    sum_exp: Callable[..., torch.Tensor]
    softmax_grad: Callable[..., torch.Tensor]


EAGER = Passes(_row_max, _sum_exp, _softmax_grad)


@functools.cache
def compiled_passes() -> Passes:
    # One compiled wrapper per process; a chunk of another length (the last one) is one recompile.
    return Passes(*(torch.compile(f, fullgraph=True, dynamic=False) for f in (_row_max, _sum_exp, _softmax_grad)))


def passes_for(device: torch.device, compiled: bool | None) -> Passes:
    """``compiled`` None: compiled on CUDA (Inductor's Triton kernels), eager elsewhere."""
    return compiled_passes() if (device.type == "cuda" if compiled is None else compiled) else EAGER


# --- the op ------------------------------------------------------------------------------------------------


def _all_reduce(x: torch.Tensor, state: ParallelState, op=dist.ReduceOp.SUM) -> None:
    if state.tp_size > 1:
        dist.all_reduce(x, op=op, group=state.tp_group)


@dataclass
class _Chunk:
    """One chunk's loss per token and, with gradients, its logits' gradient G (model dtype)."""

    losses: torch.Tensor
    grad_logits: torch.Tensor | None


def _chunk(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor, scale: torch.Tensor | None,
           state: ParallelState, passes: Passes) -> _Chunk:
    """hidden ``[c, h]``, weight ``[V/TP, h]``, global target ids ``[c]``, scale ``[c]`` (None: no gradient)."""
    logits = F.linear(hidden, weight)  # [c, V/TP], model dtype
    local_vocab = logits.shape[-1]
    start = state.tp_rank * local_vocab
    inside = (target >= start) & (target < start + local_vocab)
    local_target = (target - start).masked_fill(~inside, 0).unsqueeze(-1)  # [c, 1]
    row_max = passes.row_max(logits)
    _all_reduce(row_max, state, dist.ReduceOp.MAX)
    target_logit = logits.gather(-1, local_target).squeeze(-1).float().masked_fill(~inside, 0.0)
    sums = torch.stack([target_logit, passes.sum_exp(logits, row_max)])  # [2, c]: one all-reduce for both
    _all_reduce(sums, state)
    target_logit, sum_exp = sums
    shifted_target = target_logit - row_max
    losses = sum_exp.log() - shifted_target
    if scale is None:
        return _Chunk(losses, None)
    grad = passes.softmax_grad(logits, row_max, sum_exp, scale)
    del logits
    # The target's entry: (p_t - 1) * scale on the rank that owns it; other ranks write back what is there.
    target_grad = ((shifted_target.exp() / sum_exp - 1.0) * scale).to(grad.dtype).unsqueeze(-1)
    grad.scatter_(-1, local_target, torch.where(inside.unsqueeze(-1), target_grad, grad.gather(-1, local_target)))
    return _Chunk(losses, grad)


def _accumulate(acc: torch.Tensor, grad_logits: torch.Tensor, hidden: torch.Tensor) -> None:
    """``acc += G^T h`` in fp32: inside the GEMM where ``addmm`` takes ``out_dtype`` (CUDA, sm80 and later: bf16
    or fp16 operands, fp32 accumulator and output), else through the chunk's sum in the operands' dtype."""
    if acc.dtype == grad_logits.dtype:
        acc.addmm_(grad_logits.t(), hidden)
    elif acc.is_cuda and torch.cuda.get_device_capability(acc.device)[0] >= 8:
        torch.addmm(acc, grad_logits.t(), hidden, out_dtype=torch.float32, out=acc)
    else:
        acc += torch.mm(grad_logits.t(), hidden).float()


@dataclass(frozen=True)
class Chunking:
    """How ``fused_head_loss`` runs: ``rows`` tokens per chunk (None: ``chunk_rows``); ``compiled``: the
    elementwise passes under torch.compile (None: on CUDA)."""

    rows: int | None = None
    compiled: bool | None = None


@dataclass(frozen=True)
class _Plan:
    state: ParallelState
    rows: int
    passes: Passes


class _FusedHeadLoss(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, target, loss_mask, plan):
        """hidden ``[N, h]``, weight ``[V/TP, h]``, target ``[N]``, loss_mask ``[N]`` (float, None) -> mean loss."""
        n = hidden.shape[0]
        mask = None if loss_mask is None else loss_mask.float()
        grad_hidden = weight_acc = scale = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            # The mean's gradient per token, as autograd computes it: (1 / count) * mask, or 1 / N.
            full = torch.full((n,), 1.0 / n, device=hidden.device)  # a fill: no host-to-device copy, no sync
            scale = full if mask is None else (1.0 / mask.sum()) * mask
            grad_hidden = torch.empty_like(hidden)
            acc_dtype = torch.float32 if weight.dtype in (torch.bfloat16, torch.float16) else weight.dtype
            weight_acc = torch.zeros_like(weight, dtype=acc_dtype) if ctx.needs_input_grad[1] else None
        losses = torch.empty(n, dtype=torch.float32, device=hidden.device)
        for lo in range(0, n, plan.rows):
            hi = min(lo + plan.rows, n)
            part = _chunk(hidden[lo:hi], weight, target[lo:hi], None if scale is None else scale[lo:hi],
                          plan.state, plan.passes)
            losses[lo:hi] = part.losses
            if part.grad_logits is not None:
                assert grad_hidden is not None
                torch.mm(part.grad_logits, weight, out=grad_hidden[lo:hi])
                if weight_acc is not None:
                    _accumulate(weight_acc, part.grad_logits, hidden[lo:hi])
        ctx.grads = (grad_hidden, weight_acc)
        ctx.weight_dtype = weight.dtype
        return losses.mean() if mask is None else (losses * mask).sum() / mask.sum()

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, weight_acc = ctx.grads
        ctx.grads = None  # one backward: the buffers are scaled in place
        if grad_hidden is not None:
            grad_hidden = grad_hidden.mul_(grad_loss)
        if weight_acc is not None:
            weight_acc = weight_acc.mul_(grad_loss).to(ctx.weight_dtype)
        return grad_hidden, weight_acc, None, None, None


def fused_head_loss(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                    loss_mask: torch.Tensor | None, state: ParallelState,
                    chunking: Chunking | None = None) -> torch.Tensor:
    """Masked mean fp32 cross entropy of the tied head ``hidden [..., h] @ weight [V/TP, h]^T`` against ``labels
    [...]`` (global ids, already shifted) and the loss mask ``[...]`` (None: every token), as
    ``masked_mean_loss(F.linear(hidden, weight), ...)`` computes it, without the logits."""
    needs_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    if needs_grad and weight.dtype == torch.float16:  # see the module docstring: G would underflow
        return masked_mean_loss(F.linear(copy_to_tp(hidden, state), weight), labels, loss_mask, state)
    chunking = chunking or Chunking()
    flat = copy_to_tp(hidden, state).reshape(-1, hidden.shape[-1])
    mask = None if loss_mask is None else loss_mask.reshape(-1)
    rows = chunking.rows or chunk_rows(flat.shape[0], weight.shape[0], flat.device)
    plan = _Plan(state, rows, passes_for(flat.device, chunking.compiled))
    return _FusedHeadLoss.apply(flat, weight, labels.reshape(-1), mask, plan)
