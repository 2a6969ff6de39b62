"""The BLOOM decoder as trained by BigScience, tensor-parallel through bloomtrain.parallel.

Pieces (each a separate module with a plain forward, so the trainer can wrap them as pipeline LayerSpecs;
their state_dict keys are the Megatron-DeepSpeed layer-file keys; docs/bloom-training.md, "Conversion to
transformers"):

- ``BloomEmbedding``: vocab-parallel word embedding -> embedding LayerNorm -> dropout. Keys
  ``word_embeddings.weight``, ``word_embeddings.norm.{weight,bias}``. It also owns the tied LM head
  (``logits``), which reads the same weight: the head has no parameters of its own.
- ``BloomBlock``: pre-LN ``x + drop(attn(ln1(x)))`` then ``x + drop(mlp(ln2(x)))``; fused QKV laid out per
  head as ``[q|k|v]`` (a column-parallel shard is a contiguous block of whole heads), ALiBi softmax in
  fp32, tanh GeLU.
- ``LayerNorm`` as the final norm (bare ``weight``/``bias``).

Shapes: b batch, s tokens, h hidden, np heads on this rank, hd head dim, V/TP local vocab. Activations
are batch-first ``[b, s, h]`` like transformers (Megatron uses ``[s, b, h]``). Attention positions are
key indices: identical to transformers for unpadded, right-padded and left-padded batches (softmax is
shift-invariant per row); masks with holes in the middle give different ALiBi biases than transformers,
which counts positions with ``cumsum(attention_mask) - 1``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from bloomtrain.kernels import KernelSet, get_kernels
from bloomtrain.model.alibi import local_alibi_slopes
from bloomtrain.model.config import ModelConfig
from bloomtrain.parallel.cross_entropy import masked_mean_loss
from bloomtrain.parallel.head_loss import fused_head_loss
from bloomtrain.parallel.init import init_normal_
from bloomtrain.parallel.layers import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, divide
from bloomtrain.parallel.mappings import copy_to_tp, gather_from_tp
from bloomtrain.parallel.state import ParallelState

# Output projections get Megatron's scaled init, std / sqrt(2L).
_OUTPUT_PROJECTIONS = ("self_attention.dense.weight", "mlp.dense_4h_to_h.weight")


class LayerNorm(nn.Module):
    """LayerNorm over the last dim through the kernel set; TP-duplicated weight (1) and bias (0)."""

    def __init__(self, size: int, eps: float, kernels: KernelSet, *, dtype=None, device=None) -> None:
        super().__init__()
        self.eps, self.kernels = eps, kernels
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(size, dtype=dtype, device=device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels.layer_norm(x, self.weight, self.bias, self.eps)


@torch.no_grad()
def _init_weights(module: nn.Module, prefix: str, config: ModelConfig, state: ParallelState) -> None:
    """LayerNorms to (1, 0), biases to 0, weights to N(0, std) drawn TP-invariantly from their global name."""
    for name, param in module.named_parameters():
        full_name = f"{prefix}{name}"
        if param.device.type == "meta":
            continue
        owner = module.get_submodule(name.rpartition(".")[0]) if "." in name else module
        if isinstance(owner, LayerNorm):
            param.fill_(1.0 if name.endswith("weight") else 0.0)
        elif name.endswith("bias"):
            param.zero_()
        else:
            std = config.output_init_std if name.endswith(_OUTPUT_PROJECTIONS) else config.init_std
            init_normal_(param, std, config.init_seed, full_name, state)


class WordEmbedding(VocabParallelEmbedding):
    """The vocab-parallel table plus BLOOM's embedding LayerNorm as its ``norm`` child (Megatron's layout)."""

    def __init__(self, config: ModelConfig, state: ParallelState, kernels: KernelSet, *, sparse_grad: bool = False,
                 dtype=None, device=None):
        super().__init__(config.padded_vocab_size(state.tp_size), config.hidden_size, state,
                         sparse_grad=sparse_grad, dtype=dtype, device=device)
        self.norm = LayerNorm(config.hidden_size, config.layernorm_eps, kernels, dtype=dtype, device=device)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.norm(super().forward(ids))


class BloomEmbedding(nn.Module):
    """Token ids ``[b, s]`` -> hidden ``[b, s, h]``; ``logits`` is the tied head.

    ``head_in_same_backward``: the caller always runs ``logits`` of this same module in the backward
    that reaches the lookup (one model, or one pipeline stage holding both), so the lookup may return
    a sparse gradient (see ``VocabParallelEmbedding``).
    """

    def __init__(self, config: ModelConfig, state: ParallelState, *, head_in_same_backward: bool = False,
                 dtype=None, device=None) -> None:
        super().__init__()
        self.config, self.state = config, state
        self.word_embeddings = WordEmbedding(config, state, get_kernels(config.kernels),
                                             sparse_grad=head_in_same_backward, dtype=dtype, device=device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _init_weights(self, "", self.config, self.state)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.dropout(self.word_embeddings(input_ids), self.config.hidden_dropout, self.training)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Hidden ``[b, s, h]`` -> this rank's vocab block of the logits ``[b, s, V/TP]`` (model dtype)."""
        return F.linear(copy_to_tp(hidden, self.state), self.word_embeddings.weight)

    def head_loss(self, hidden: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor | None = None):
        """``masked_mean_loss(self.logits(hidden), ...)`` without the logits: the fused, chunked head and loss
        (bloomtrain.parallel.head_loss), for training."""
        return fused_head_loss(hidden, self.word_embeddings.weight, labels, loss_mask, self.state)


@dataclass
class LayerCache:
    """Keys and values of the tokens seen so far by one block, ``[b, np, s_past, hd]`` each."""

    key: torch.Tensor | None = None
    value: torch.Tensor | None = None


class BloomAttention(nn.Module):
    def __init__(self, config: ModelConfig, state: ParallelState, kernels: KernelSet, *, dtype=None, device=None):
        super().__init__()
        self.config, self.kernels = config, kernels
        self.local_heads = divide(config.num_heads, state.tp_size, "num_heads")
        # The model's index of this rank's first head: attention dropout masks are keyed by the global head, so a
        # TP rank drops what TP 1 drops for the same heads (bloomtrain.kernels.dropout_mask).
        self.head_offset = state.tp_rank * self.local_heads
        h = config.hidden_size
        # Output rows of the fused QKV are ordered [head][q|k|v][hd], so the contiguous row block a
        # column-parallel rank owns is whole heads (no permutation when merging TP shards).
        self.query_key_value = ColumnParallelLinear(h, 3 * h, state, dtype=dtype, device=device)
        self.dense = RowParallelLinear(h, h, state, dtype=dtype, device=device)
        slopes = local_alibi_slopes(config.num_heads, state.tp_rank, state.tp_size)
        # A meta-device model (built to be loaded with assign=True) keeps real slopes on the CPU.
        on_meta = device is not None and torch.device(device).type == "meta"
        self.register_buffer("slopes", slopes if on_meta else slopes.to(device=device), persistent=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, cache: LayerCache | None) -> torch.Tensor:
        b, sq, _ = x.shape
        hd = self.config.head_dim
        qkv = self.query_key_value(x).view(b, sq, self.local_heads, 3, hd)
        q, k, v = (t.transpose(1, 2) for t in qkv.unbind(dim=3))  # each [b, np, sq, hd]
        if cache is not None:
            if cache.key is not None and cache.value is not None:
                k, v = torch.cat([cache.key, k], dim=2), torch.cat([cache.value, v], dim=2)
            cache.key, cache.value = k, v
        dropout_p = self.config.attention_dropout if self.training else 0.0
        # Inside a compiled block's graph when its kernel set is traceable (bloomtrain.model.compiled), else opaque.
        context = self.kernels.model_attention(q, k, v, self.slopes, 1.0 / math.sqrt(hd), mask, dropout_p,
                                               head_offset=self.head_offset)
        context = context.transpose(1, 2).reshape(b, sq, self.local_heads * hd)  # [b, np, sq, hd] -> [b, sq, h]
        return self.dense(context)


class BloomMLP(nn.Module):
    def __init__(self, config: ModelConfig, state: ParallelState, kernels: KernelSet, *, dtype=None, device=None):
        super().__init__()
        self.kernels = kernels
        h, ffn = config.hidden_size, config.ffn_hidden_size
        self.dense_h_to_4h = ColumnParallelLinear(h, ffn, state, skip_bias_add=True, dtype=dtype, device=device)
        self.dense_4h_to_h = RowParallelLinear(ffn, h, state, dtype=dtype, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, bias = self.dense_h_to_4h(x)
        return self.dense_4h_to_h(self.kernels.bias_gelu(y, bias))


class BloomBlock(nn.Module):
    """One pre-LN transformer layer; ``layer_number`` (0-based) names its parameters for the init."""

    def __init__(self, config: ModelConfig, state: ParallelState, layer_number: int, *, dtype=None, device=None):
        super().__init__()
        self.config, self.state, self.layer_number = config, state, layer_number
        kernels = get_kernels(config.kernels)
        h, eps = config.hidden_size, config.layernorm_eps
        self.input_layernorm = LayerNorm(h, eps, kernels, dtype=dtype, device=device)
        self.self_attention = BloomAttention(config, state, kernels, dtype=dtype, device=device)
        self.post_attention_layernorm = LayerNorm(h, eps, kernels, dtype=dtype, device=device)
        self.mlp = BloomMLP(config, state, kernels, dtype=dtype, device=device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        _init_weights(self, f"h.{self.layer_number}.", self.config, self.state)

    def use_kernels(self, kernels: KernelSet) -> None:
        """Run this block's LayerNorms, bias + GeLU and attention through ``kernels`` (bloomtrain.model.compiled)."""
        for module in (self.input_layernorm, self.self_attention, self.post_attention_layernorm, self.mlp):
            module.kernels = kernels

    def forward(
        self, x: torch.Tensor, padding_mask: torch.Tensor | None = None, cache: LayerCache | None = None
    ) -> torch.Tensor:
        """x ``[b, s, h]``; padding_mask bool ``[b, 1, s, s_keys]``, True = masked (see ``padding_mask``)."""
        p = self.config.hidden_dropout
        x = x + F.dropout(self.self_attention(self.input_layernorm(x), padding_mask, cache), p, self.training)
        return x + F.dropout(self.mlp(self.post_attention_layernorm(x)), p, self.training)


def padding_mask(attention_mask: torch.Tensor | None, query_len: int) -> torch.Tensor | None:
    """HF-style ``[b, s_keys]`` (1 = token, 0 = pad) -> the kernels' bool ``[b, 1, sq, s_keys]``, True = masked."""
    if attention_mask is None:
        return None
    b, sk = attention_mask.shape
    return (attention_mask == 0).view(b, 1, 1, sk).expand(b, 1, query_len, sk)


class BloomModel(nn.Module):
    """Embedding -> blocks -> final LayerNorm -> tied head, all on one pipeline stage.

    ``forward`` returns this rank's vocab block of the logits; ``loss`` turns them into the masked mean
    fp32 cross-entropy. ``train_loss`` is the same loss through the fused head, without the logits (training).
    ``gather_logits`` assembles the full vocabulary (tests, generation).
    """

    def __init__(self, config: ModelConfig, state: ParallelState | None = None, *, dtype=None, device=None):
        super().__init__()
        self.config = config
        self.state = state = state or ParallelState.single()
        # forward always ends in embedding.logits: the head shares every backward with the lookup.
        self.embedding = BloomEmbedding(config, state, head_in_same_backward=True, dtype=dtype, device=device)
        self.blocks = nn.ModuleList(
            BloomBlock(config, state, i, dtype=dtype, device=device) for i in range(config.num_layers)
        )
        self.final_norm = LayerNorm(config.hidden_size, config.layernorm_eps, get_kernels(config.kernels),
                                    dtype=dtype, device=device)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        cache: list[LayerCache] | None = None,
    ) -> torch.Tensor:
        """input_ids ``[b, s]``; attention_mask ``[b, s_past + s]`` (1 = token, 0 = pad) -> ``[b, s, V/TP]``."""
        return self.embedding.logits(self.hidden_states(input_ids, attention_mask, cache))

    def hidden_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                      cache: list[LayerCache] | None = None) -> torch.Tensor:
        """The final LayerNorm's output ``[b, s, h]``: what the head reads."""
        mask = padding_mask(attention_mask, input_ids.shape[1])
        x = self.embedding(input_ids)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, None if cache is None else cache[i])
        return self.final_norm(x)

    def loss(self, logits: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor | None = None):
        """Mean fp32 cross-entropy over unmasked tokens; labels ``[b, s]`` are already shifted."""
        return masked_mean_loss(logits, labels, loss_mask, self.state)

    def train_loss(self, input_ids: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor | None = None,
                   attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """``loss(forward(input_ids, attention_mask), labels, loss_mask)`` through the fused head: no logits."""
        return self.embedding.head_loss(self.hidden_states(input_ids, attention_mask), labels, loss_mask)

    def gather_logits(self, logits: torch.Tensor) -> torch.Tensor:
        return gather_from_tp(logits, self.state)

    def new_cache(self) -> list[LayerCache]:
        return [LayerCache() for _ in self.blocks]
