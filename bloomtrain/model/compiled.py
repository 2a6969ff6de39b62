"""``compile_blocks``: torch.compile of every transformer block in place (``model.compile``), torchtitan's
per-block compile, attention and tensor-parallel collectives inside the graph.

A compiled block is one graph forward and one backward (Dynamo, then AOTAutograd and Inductor), at any TP size and
with dropout on: LayerNorm -> QKV projection -> attention -> output projection + bias -> dropout -> residual add ->
LayerNorm -> h->4h + bias + tanh-GeLU -> 4h->h + bias -> dropout -> residual add. What could split it is decided
before the first compiled call:

- Attention: ``block_attention`` chooses once, when the blocks are compiled, from a probe of the blocks' device,
  dtype, head count and head dim: on CUDA with ``model.kernels`` auto or fused, the Triton flash kernel where it
  serves that shape and passed its first-use self-check (which therefore runs here, outside any graph); otherwise,
  and on the CPU, the PyTorch reference (the full-square ALiBi softmax composition). The flash kernel is a
  registered custom op with a fake and an autograd formula (bloomtrain.kernels.flash_attention): Dynamo keeps it
  in the graph and Inductor launches it between its own kernels. The one per-call branch left, a padding mask
  (generation) taking the reference, is a Python fact Dynamo guards on, not a break.
- Tensor parallelism: the mappings (bloomtrain.parallel.mappings) are functional collectives that Dynamo traces.

Inductor fuses each run of elementwise work (bias, dropout, residual, the LayerNorm statistics, GeLU) into one
kernel next to the matmuls. The LayerNorm and GeLU inside are the PyTorch references (bloomtrain.kernels.reference):
traceable code Inductor can fuse, where the csrc/ kernels would be opaque calls; with compile on, the csrc/ kernels
(LayerNorm, bias-GeLU, the CPU block-causal attention) serve only eager runs (model.compile=off). The LayerNorms
outside the blocks (the embedding's, the final one) compile alone on the same reference; the embedding lookup, the
head and the loss stay eager.

The blocks share one compiled graph per shape, grad mode and train/eval mode (their forward is one code object;
parameters are graph inputs), so nothing recompiles after the first step but a train/eval switch.
``nn.Module.compile`` keeps the parameter names, so checkpoints are unchanged. Dropout inside a compiled graph draws
from Inductor's Philox stream, seeded from the device generator at each call: a run replays it from its RNG state
(checkpoints, activation recompute), but its masks are not eager mode's. At dropout 0 a compiled block equals the
eager one to fp32 rounding (tests/bloomtrain/test_compiled_blocks.py, which also counts graphs and recompiles).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch
from torch import nn

from bloomtrain.kernels import KernelSet, reference_kernels
from bloomtrain.kernels.attention import attention_reference
from bloomtrain.kernels.flash_attention import flash_attention
from bloomtrain.kernels.reference import alibi_softmax
from bloomtrain.kernels.selfcheck import use_flash
from bloomtrain.model.bloom import BloomAttention, BloomBlock, LayerNorm
from bloomtrain.model.config import ModelConfig

log = logging.getLogger(__name__)

FLASH_KINDS = ("auto", "fused")  # the kernel sets whose attention is the flash kernel on CUDA


def reference_attention(q, k, v, slopes, scale: float, mask=None, dropout_p: float = 0.0, head_offset: int = 0
                        ) -> torch.Tensor:
    """The PyTorch attention (full square, reference ALiBi softmax): traceable, the CPU's compiled path."""
    return attention_reference(q, k, v, slopes, scale, mask, dropout_p, softmax=alibi_softmax, head_offset=head_offset)


def flash_or_reference(q, k, v, slopes, scale: float, mask=None, dropout_p: float = 0.0, head_offset: int = 0
                       ) -> torch.Tensor:
    """The flash op, or the reference for a padding mask (which the flash kernel does not take): both traceable."""
    if mask is None:
        return flash_attention(q, k, v, slopes, scale, dropout_p, head_offset=head_offset)
    return reference_attention(q, k, v, slopes, scale, mask, dropout_p, head_offset)


def block_attention(kind: str, attention: BloomAttention) -> tuple[str, Callable[..., torch.Tensor]]:
    """(name, function): the attention of ``kind``'s compiled blocks like ``attention``, decided once.

    Flash where ``kind`` uses it, the block is on CUDA, and the kernel serves the block's dtype, head count and head
    dim and passed its self-check (run now, on first use: ``use_flash``'s rules; ``fused`` raises where it failed);
    the reference otherwise."""
    weight = attention.query_key_value.weight
    if kind not in FLASH_KINDS or weight.device.type != "cuda":
        return "torch", reference_attention
    probe = weight.new_zeros(1, attention.local_heads, 1, attention.config.head_dim)  # [b, np, s, hd]
    slopes = attention.get_buffer("slopes")
    if use_flash(probe, probe, probe, slopes, None, strict=kind == "fused"):
        return "flash", flash_or_reference
    return "torch", reference_attention


def block_kernels(name: str, attention: Callable[..., torch.Tensor]) -> KernelSet:
    """The kernels of a compiled block: PyTorch LayerNorm, GeLU and softmax (Inductor fuses them), ``attention``."""
    torch_ops = reference_kernels()
    return KernelSet(f"compiled+{name}", torch_ops.layer_norm, torch_ops.bias_gelu, torch_ops.alibi_softmax,
                     attention, traceable=True)


def compile_blocks(model: nn.Module, config: ModelConfig, device_type: str, *, backend: str | Callable = "inductor"
                   ) -> int:
    """Compile every ``BloomBlock`` of ``model`` in place when ``config.compile`` says so for ``device_type``;
    returns how many (0: eager). The attention is chosen now (``block_attention``); compilation itself happens on
    each graph's first call (the first step). ``backend``: torch.compile's (tests count graphs with their own)."""
    if not config.compiles(device_type):
        return 0
    blocks = [m for m in model.modules() if isinstance(m, BloomBlock)]
    attention = "none"
    if blocks:
        attention, fn = block_attention(config.kernels, blocks[0].self_attention)
        kernels = block_kernels(attention, fn)
        for block in blocks:
            block.use_kernels(kernels)
            block.compile(dynamic=False, backend=backend)
    # The LayerNorms outside the blocks (the embedding's, the final one) compile on their own.
    inside = {id(m) for block in blocks for m in block.modules()}
    norms = [m for m in model.modules() if isinstance(m, LayerNorm) and id(m) not in inside]
    for norm in norms:
        norm.kernels = block_kernels("torch", reference_attention)
        norm.compile(dynamic=False, backend=backend)
    log.info("model.compile=%s: %d transformer blocks and %d LayerNorms compile on their first call (attention: %s, "
             "inside the blocks' graphs)", config.compile, len(blocks), len(norms), attention)
    return len(blocks)
