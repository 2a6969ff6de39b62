"""``compile_blocks``: torch.compile of every transformer block in place (``model.compile``), torchtitan's
per-block compile with the attention kernel opaque.

A compiled block runs as two Inductor graphs around the attention call (``bloom._attend`` is
``torch.compiler.disable``d, so the kernel dispatch and the Triton flash kernel run eagerly between them):

- before: LayerNorm -> QKV projection;
- after: output projection + bias -> dropout -> residual add -> LayerNorm -> h->4h + bias + tanh-GeLU -> 4h->h
  + bias -> dropout -> residual add.

Inductor fuses each run of elementwise work (bias, dropout, residual, the LayerNorm statistics, GeLU) into one
kernel next to the matmuls, which eager mode runs as separate kernels with a tensor written and read between
each. The LayerNorm and GeLU inside are the PyTorch references (bloomtrain.kernels.reference): traceable code
Inductor can fuse, where the csrc/ kernels would be opaque calls. The LayerNorms outside the blocks (the embedding's,
the final one) compile alone on the same reference; the embedding lookup, the head and the loss stay eager.
With compile on, the csrc/ LayerNorm and bias-GeLU kernels therefore serve only eager runs (model.compile=off).

Under tensor parallelism the TP collectives (bloomtrain.parallel.mappings) are graph breaks: each block then
compiles as the pieces between them. The blocks share one compiled graph per shape and grad mode (their forward
is one code object; parameters are graph inputs). ``nn.Module.compile`` keeps the parameter names, so
checkpoints are unchanged. Dropout inside a compiled graph draws from Inductor's Philox stream, seeded from the
device generator at each call: a run replays it from its RNG state (checkpoints, activation recompute), but
its masks are not eager mode's. At dropout 0 a compiled block equals the eager one to fp32 rounding
(tests/bloomtrain/test_compiled_blocks.py).
"""

from __future__ import annotations

import functools
import logging

from torch import nn

from bloomtrain.kernels import KernelSet, get_kernels, reference_kernels
from bloomtrain.model.bloom import BloomBlock, LayerNorm
from bloomtrain.model.config import ModelConfig

log = logging.getLogger(__name__)


@functools.cache
def block_kernels(kind: str) -> KernelSet:
    """The kernels of a compiled block: PyTorch LayerNorm and GeLU (Inductor fuses them), ``kind``'s attention."""
    torch_ops, configured = reference_kernels(), get_kernels(kind)
    return KernelSet(f"compiled+{configured.name}", torch_ops.layer_norm, torch_ops.bias_gelu,
                     configured.alibi_softmax, configured.attention)


def compile_blocks(model: nn.Module, config: ModelConfig, device_type: str) -> int:
    """Compile every ``BloomBlock`` of ``model`` in place when ``config.compile`` says so for ``device_type``;
    returns how many (0: eager). Compilation itself happens on each graph's first call (the first step)."""
    if not config.compiles(device_type):
        return 0
    kernels = block_kernels(config.kernels)
    blocks = [m for m in model.modules() if isinstance(m, BloomBlock)]
    for block in blocks:
        block.use_kernels(kernels)
        block.compile(dynamic=False)
    # The LayerNorms outside the blocks (the embedding's, the final one) compile on their own.
    inside = {id(m) for block in blocks for m in block.modules()}
    norms = [m for m in model.modules() if isinstance(m, LayerNorm) and id(m) not in inside]
    for norm in norms:
        norm.kernels = kernels
        norm.compile(dynamic=False)
    log.info("model.compile=%s: %d transformer blocks and %d LayerNorms compile on their first call (%s kernels, "
             "attention opaque)", config.compile, len(blocks), len(norms), kernels.name)
    return len(blocks)
