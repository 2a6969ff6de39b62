"""The BLOOM model as a DeepSpeed ``PipelineModule``: one spec per block, tied embedding and head.

Spec list (the indices are the checkpoint's layer-file indices; bloomtrain.checkpoint.format)::

    0      fn      input passthrough (Meg-DS: fp16 cast)       not saved
    1      tied    EmbeddingPipe: word embeddings + embed LN   layer_01
    2      fn      passthrough (Meg-DS: [b,s]->[s,b] transpose)
    3..    spec    BloomTransformerLayerPipe x L               layer_03 .. layer_{L+2}
    3+L    fn      passthrough
    4+L    spec    final LayerNorm (bare weight/bias)          layer_{L+4}
    5+L    tied    head: (hidden, tied weight) for LossFn      never saved: no module of its own

The last stage's output is the final LayerNorm's output with the tied weight, not logits: LossFn runs the head
and the loss as one chunked op (bloomtrain.parallel.head_loss), so no ``[tokens, V/TP]`` tensor exists and the
engine's output buffer holds ``[b, s, h]`` (it keeps each micro-batch's output until its backward).

Class names matter to DeepSpeed: ``type:transformer|embedding`` partitioning matches them by regex, and
activation checkpointing is restricted to ``BloomTransformerLayerPipe`` (reentrant checkpointing of the
embedding stage crashes: its input ids need no grad; docs/bloom-training.md, "DeepSpeed pipeline pitfalls").

The embedding LayerNorm exists only on the first stage. The last stage's copy of the tied module is built
without it, because an untrained duplicate would be saved and then overwrite the trained one in
ds_to_universal (same section). Only ``word_embeddings.weight`` is tied (DeepSpeed all-reduces its
gradient over the first and last stage and counts it once in the norm).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
from deepspeed.pipe import LayerSpec, PipelineModule, TiedLayerSpec
from deepspeed.runtime import utils as ds_utils
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology
from torch import nn

from bloomdata.errors import BloomstackError
from bloomtrain.kernels import get_kernels
from bloomtrain.model.bloom import BloomBlock, BloomEmbedding, LayerNorm
from bloomtrain.model.config import ModelConfig
from bloomtrain.parallel.head_loss import fused_head_loss
from bloomtrain.parallel.state import ParallelState

EMBED_KEY = "embed"
TIED_WEIGHT = "word_embeddings.weight"
CHECKPOINTABLE = ["BloomTransformerLayerPipe"]


class EmbeddingPipe(BloomEmbedding):
    """``BloomEmbedding`` for a pipeline; ``with_norm=False`` builds the head-only copy of the last stage."""

    def __init__(self, config: ModelConfig, state: ParallelState, *, with_norm: bool = True) -> None:
        # With one stage, DeepSpeed builds one instance of the tied module for the lookup and the head;
        # with several, the first stage's copy has no head, and its gradient must stay dense.
        super().__init__(config, state, head_in_same_backward=state.pp_size == 1)
        if not with_norm:
            # The head reads only the word-embedding matrix; dropping the LN keeps it off the last stage.
            self.word_embeddings.norm = nn.Identity()  # type: ignore[assignment]


class BloomTransformerLayerPipe(BloomBlock):
    """A block with the single-tensor interface of a pipeline stage (causal, no padding mask)."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(hidden)


class FinalLayerNorm(LayerNorm):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config.hidden_size, config.layernorm_eps, get_kernels(config.kernels))


def _passthrough(x: torch.Tensor) -> torch.Tensor:
    return x


def _head(embedding: EmbeddingPipe, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # DeepSpeed hands the last stage's output to loss_fn(output, labels): the head's input and its weight.
    return hidden, embedding.word_embeddings.weight


class LossFn:
    """Masked mean fp32 cross-entropy of the tied head, computed with it (``fused_head_loss``) from the final
    hidden states and the tied weight that ``_head`` returns. Stateless: the NaN drill poisons the loss masks of
    the batches instead (bloomtrain.callbacks.nan_drill).

    A non-finite loss is made to poison every gradient it reaches (backward multiplies by NaN instead of 1),
    so the global grad norm is NaN and the optimizer skips the update: a non-finite loss can never be
    applied, even where its gradients would happen to be finite. The factor is a detached constant, so a
    finite loss is unchanged bit for bit and needs no host sync.
    """

    def __init__(self, state: ParallelState) -> None:
        self.state = state

    def __call__(self, head: tuple[torch.Tensor, torch.Tensor],
                 labels: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        (hidden, weight), (target, loss_mask) = head, labels
        loss = fused_head_loss(hidden, weight, target, loss_mask, self.state)
        guard = torch.where(torch.isfinite(loss), 1.0, float("nan")).detach()
        return loss * guard


def layer_specs(config: ModelConfig, state: ParallelState) -> list:
    specs: list = [
        _passthrough,
        TiedLayerSpec(EMBED_KEY, EmbeddingPipe, config, state, tied_weight_attr=[TIED_WEIGHT]),
        _passthrough,
    ]
    specs += [LayerSpec(BloomTransformerLayerPipe, config, state, i) for i in range(config.num_layers)]
    specs += [
        _passthrough,
        LayerSpec(FinalLayerNorm, config),
        TiedLayerSpec(EMBED_KEY, EmbeddingPipe, config, state, with_norm=False, forward_fn=_head,
                      tied_weight_attr=[TIED_WEIGHT]),
    ]
    return specs


def stage_bounds(specs: list, num_stages: int, method: str) -> list[int]:
    """DeepSpeed's partition boundaries (``parts``) for ``type:`` and ``uniform`` methods."""
    method = method.lower()
    if method == "uniform":
        return ds_utils.partition_uniform(num_items=len(specs), num_parts=num_stages)
    if method.startswith("type:"):
        regex = re.compile(method.split(":", 1)[1], re.IGNORECASE)
        weights = [int(isinstance(s, LayerSpec) and bool(regex.search(s.typename.__name__))) for s in specs]
        return ds_utils.partition_balanced(weights=weights, num_parts=num_stages)
    raise BloomstackError(
        f"parallel.partition_method={method!r} is not supported; use 'type:transformer|embedding' "
        "(BLOOM's), 'type:transformer' or 'uniform'"
    )


def _bad_stages(config: ModelConfig, pp: int, method: str) -> list[int]:
    specs = layer_specs(config, ParallelState.single())
    parts = stage_bounds(specs, pp, method)
    first_block, last_block = 3, 3 + config.num_layers - 1
    bad = []
    for stage in range(pp):
        lo, hi = parts[stage], parts[stage + 1]
        owns_block = any(first_block <= i <= last_block for i in range(lo, hi))
        owns_embedding = stage == 0 and lo <= 1 < hi
        if not (owns_block or owns_embedding):
            bad.append(stage)
    return bad


def check_layout(config: ModelConfig, tp: int, pp: int, method: str) -> None:
    """Fail before DeepSpeed does if a stage or TP rank would own no sharded, non-tied parameter.

    DeepSpeed's BF16_Optimizer computes the norm of an empty list on such a rank and crashes with
    ``stack expects a non-empty TensorList`` (docs/bloom-training.md, "DeepSpeed pipeline pitfalls").
    Every stage therefore needs a transformer block (the first stage may instead own just the embedding);
    every block has TP-sharded weights.
    """
    if tp > 1 and (config.num_heads % tp or config.padded_vocab_size(tp) % tp):
        raise BloomstackError(f"parallel.tp={tp} must divide num_heads={config.num_heads} and the padded vocab")
    if pp > config.num_layers + 1:
        raise BloomstackError(f"parallel.pp={pp} exceeds num_layers + 1 = {config.num_layers + 1}; use fewer stages")
    bad = _bad_stages(config, pp, method)
    if not bad:
        return
    fixes = [m for m in ("type:transformer", "type:transformer|embedding", "uniform")
             if m != method.lower() and not _bad_stages(config, pp, m)]
    max_pp = max((p for p in range(1, config.num_layers + 2) if not _bad_stages(config, p, method)), default=1)
    hint = f"use parallel.partition_method={fixes[0]!r}" if fixes else f"use parallel.pp <= {max_pp}"
    raise BloomstackError(
        f"pipeline layout pp={pp} with partition_method={method!r} over {config.num_layers} layers leaves "
        f"stage(s) {bad} without a transformer block, so those ranks own no sharded parameter and DeepSpeed's "
        f"BF16 optimizer would crash; {hint}"
    )


def build_pipeline(config: ModelConfig, state: ParallelState, *, partition_method: str,
                   activation_checkpointing: bool, loss_fn: Callable | None = None) -> PipelineModule:
    check_layout(config, state.tp_size, state.pp_size, partition_method)
    topology = PipeModelDataParallelTopology(num_pp=state.pp_size, num_mp=state.tp_size, num_dp=state.dp_size)
    return PipelineModule(
        layers=layer_specs(config, state),
        topology=topology,
        loss_fn=loss_fn or LossFn(state),
        partition_method=partition_method,
        activation_checkpoint_interval=1 if activation_checkpointing else 0,
        checkpointable_layers=CHECKPOINTABLE,
    )


def universal_checkpoint_info(config: ModelConfig) -> dict:
    """ds_to_universal's merge rules for our parameter names (Meg-DS's GPTModelPipe patterns).

    The vocabulary is padded to a TP-independent size, so the embedding is a plain dim-0 concatenation
    (no VOCABULARY patterns, which would strip and zero-refill the trainable padded rows).
    """
    from deepspeed.checkpoint import constants as c  # noqa: PLC0415

    return {
        c.UNIVERSAL_CHECKPOINT_VERSION_KEY: c.UNIVERSAL_CHECKPOINT_VERSION_VALUE,
        c.PIPELINE_REPLICATED_PARAMETER_PATTERNS: [r"tied_modules\.embed\.word_embeddings\.weight"],
        c.PARAMETER_TO_AVERAGE_PATTERNS: [
            r"tied_modules\.embed\.word_embeddings\.norm\.(weight|bias)$",
            r"\d+\.(input_layernorm|post_attention_layernorm)\.(weight|bias)$",
            r"\d+\.self_attention\.dense\.bias$",
            r"\d+\.mlp\.dense_4h_to_h\.bias$",
            r"\d+\.(weight|bias)$",  # the final LayerNorm
        ],
        c.PARAMETER_WITH_ROW_PARALLELISM_PATTERNS: [
            r"\d+\.self_attention\.dense\.weight$",
            r"\d+\.mlp\.dense_4h_to_h\.weight$",
        ],
    }
