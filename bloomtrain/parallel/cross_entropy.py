"""Cross-entropy over vocab-sharded logits without gathering them (Megatron's vocab_parallel_cross_entropy).

Each rank holds logits ``[..., V / TP]`` for its contiguous vocabulary block. Three all-reduces over TP
(max, target logit, sum of exp) give the exact per-token loss ``log(sum_v exp(z_v)) - z_target``; the
backward is ``softmax - onehot`` on the local block. Unlike Megatron, the input is never modified in place.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bloomtrain.parallel.state import ParallelState


def _all_reduce(x: torch.Tensor, state: ParallelState, op=dist.ReduceOp.SUM) -> None:
    if state.tp_size > 1:
        dist.all_reduce(x, op=op, group=state.tp_group)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, state: ParallelState) -> torch.Tensor:
        local_vocab = logits.shape[-1]
        start = state.tp_rank * local_vocab
        logits_max = logits.max(dim=-1).values
        _all_reduce(logits_max, state, dist.ReduceOp.MAX)
        shifted = logits - logits_max.unsqueeze(-1)

        outside = (target < start) | (target >= start + local_vocab)
        local_target = (target - start).masked_fill(outside, 0)
        target_logit = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        _all_reduce(target_logit, state)

        exp = shifted.exp_()  # shifted is our own buffer: reuse it for the softmax
        sum_exp = exp.sum(dim=-1)
        _all_reduce(sum_exp, state)
        loss = sum_exp.log() - target_logit

        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, outside, local_target)
        return loss

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        softmax, outside, local_target = ctx.saved_tensors
        grad = softmax.clone()
        onehot = (~outside).to(grad.dtype).unsqueeze(-1)
        grad.scatter_add_(-1, local_target.unsqueeze(-1), -onehot)
        return grad * grad_loss.unsqueeze(-1), None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor, state: ParallelState) -> torch.Tensor:
    """Per-token loss ``[...]`` from local logits ``[..., V / TP]`` (fp32 recommended) and global ids ``[...]``."""
    return _VocabParallelCrossEntropy.apply(logits, target, state)


def masked_mean_loss(
    logits: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor | None, state: ParallelState
) -> torch.Tensor:
    """Mean fp32 cross-entropy over tokens where ``loss_mask`` is nonzero (all tokens when None)."""
    if state.tp_size == 1:  # same maths, one fused ATen op
        flat = logits.float().reshape(-1, logits.shape[-1])
        losses = F.cross_entropy(flat, labels.reshape(-1), reduction="none").view(labels.shape)
    else:
        losses = vocab_parallel_cross_entropy(logits.float(), labels, state)
    if loss_mask is None:
        return losses.mean()
    mask = loss_mask.to(losses.dtype)
    return (losses * mask).sum() / mask.sum()
