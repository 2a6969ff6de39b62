"""Pipeline spec list, partitioning and the start-up layout check; optimizer groups; MFU formula."""

from __future__ import annotations

import pytest
import torch
from deepspeed.pipe import LayerSpec, TiedLayerSpec

from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint.format import EMBED_INDEX, block_index, final_norm_index
from bloomtrain.engine import counted_once, param_groups
from bloomtrain.metrics import flops_per_iteration
from bloomtrain.model.bloom import BloomModel
from bloomtrain.model.config import ModelConfig
from bloomtrain.parallel.layers import mark_sharded
from bloomtrain.parallel.pipeline import (
    BloomTransformerLayerPipe,
    EmbeddingPipe,
    FinalLayerNorm,
    check_layout,
    layer_specs,
    stage_bounds,
)
from bloomtrain.parallel.state import ParallelState


def test_spec_indices_are_the_checkpoint_layer_indices():
    cfg = ModelConfig.tiny(num_layers=3)
    specs = layer_specs(cfg, ParallelState.single())
    built = {i: s for i, s in enumerate(specs) if isinstance(s, LayerSpec)}
    assert isinstance(built[EMBED_INDEX], TiedLayerSpec) and built[EMBED_INDEX].typename is EmbeddingPipe
    assert built[EMBED_INDEX].forward_fn is None
    assert [i for i, s in built.items() if s.typename is BloomTransformerLayerPipe] == [
        block_index(i) for i in range(3)]
    assert built[final_norm_index(3)].typename is FinalLayerNorm
    head = specs[-1]
    assert isinstance(head, TiedLayerSpec) and head.key == specs[EMBED_INDEX].key
    assert head.forward_fn is not None and head.module_kwargs == {"with_norm": False}


def test_head_copy_has_no_embedding_layernorm():
    cfg = ModelConfig.tiny()
    first = EmbeddingPipe(cfg, ParallelState.single())
    last = EmbeddingPipe(cfg, ParallelState.single(), with_norm=False)
    assert set(first.state_dict()) == {"word_embeddings.weight", "word_embeddings.norm.weight",
                                       "word_embeddings.norm.bias"}
    assert set(last.state_dict()) == {"word_embeddings.weight"}
    assert last.word_embeddings.weight.equal(first.word_embeddings.weight)  # same init, by name


def test_embedding_gradient_is_sparse_only_when_the_head_shares_the_stage():
    # One stage: the tied module serves the lookup and the head, so the lookup's sparse rows land in the
    # head's dense gradient. Several stages: the first stage's copy has no head, its gradient must be dense.
    cfg = ModelConfig.tiny()
    assert EmbeddingPipe(cfg, ParallelState.single()).word_embeddings.sparse_grad
    for pp_rank in (0, 1):
        stage = EmbeddingPipe(cfg, ParallelState.offline(0, 1, pp_rank, 2))
        assert not stage.word_embeddings.sparse_grad
        stage(torch.randint(0, 250, (2, 8))).sum().backward()
        assert stage.word_embeddings.weight.grad.layout == torch.strided


def test_tr11_partition_puts_an_embedding_and_five_blocks_on_the_end_stages():
    specs = layer_specs(ModelConfig.tiny(num_layers=70, num_heads=4), ParallelState.single())
    parts = stage_bounds(specs, 12, "type:transformer|embedding")
    blocks = [sum(isinstance(s, LayerSpec) and s.typename is BloomTransformerLayerPipe
                  for s in specs[parts[p]:parts[p + 1]]) for p in range(12)]
    assert blocks == [5] + [6] * 10 + [5]  # BLOOM README: 6 units per stage
    assert parts[1] > EMBED_INDEX and parts[11] <= len(specs) - 1


def test_layout_without_a_block_on_some_stage_fails_with_the_fix():
    cfg = ModelConfig.tiny()  # 2 layers: 4 units over 3 stages leaves one stage with only the head
    with pytest.raises(BloomstackError, match=r"stage\(s\) \[2\] without a transformer block.*parallel.pp <= 2"):
        check_layout(cfg, tp=1, pp=3, method="type:transformer|embedding")
    cfg4 = ModelConfig.tiny(num_layers=3)
    with pytest.raises(BloomstackError, match="use parallel.partition_method='type:transformer'"):
        check_layout(cfg4, tp=2, pp=3, method="type:transformer|embedding")
    check_layout(cfg4, tp=2, pp=3, method="type:transformer")  # one block per stage: fine
    with pytest.raises(BloomstackError, match="must divide num_heads"):
        check_layout(cfg, tp=5, pp=1, method="type:transformer")


def test_no_weight_decay_on_biases_and_layernorms():
    model = BloomModel(ModelConfig.tiny())
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(names[id(p)].endswith("weight") and p.ndim == 2 for p in decay["params"])
    assert all(p.ndim == 1 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))


def test_norm_counts_tp_duplicates_and_tied_copies_once():
    import torch

    dup, shard, tied = (torch.nn.Parameter(torch.ones(2)) for _ in range(3))
    mark_sharded(shard, 0)
    tied.ds_pipe_replicated = True
    rank0, rank1 = ParallelState.offline(0, 2), ParallelState.offline(1, 2)
    assert [counted_once(p, rank0) for p in (dup, shard, tied)] == [True, True, False]
    assert [counted_once(p, rank1) for p in (dup, shard, tied)] == [False, True, False]


def test_blooms_logged_tflops_restated_in_megatron_lms_count():
    # docs/bloom-training.md, "FLOPs and MFU": tr11 at 105.22 s/iteration on 384 A100 logged "TFLOPs: 149.02",
    # Megatron-DeepSpeed's formula at f = 4 (checkpointing counted); our count restates that iteration
    cfg = ModelConfig.bloom_176b()
    b, s, layers, h, v, seconds = 2048, 2048, 70, 14336, cfg.padded_vocab_size(4), 105.22 * 384 * 1e12
    bigscience = 24 * 4 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    assert bigscience / seconds == pytest.approx(149.0, abs=0.1)
    hw = flops_per_iteration(cfg, b, 4, recompute=True) / seconds
    model = flops_per_iteration(cfg, b, 4, recompute=False) / seconds
    assert hw == pytest.approx(147.3, abs=0.1)  # causal attention halved, the head not recomputed
    assert model == pytest.approx(111.0, abs=0.1) and model / 312 == pytest.approx(0.356, abs=0.001)


def test_loss_spikes_are_flagged_against_the_running_mean():
    from bloomtrain.callbacks.stability import LossSpikes
    from bloomtrain.metrics import progress_line

    spikes = LossSpikes(1.5)
    flags = [spikes(x) for x in (4.0, 3.9, 3.8, float("nan"), 6.5, 3.7)]
    assert flags == [False, False, False, False, True, False]
    rec = {"iteration": 3, "consumed_samples": 24, "loss": 3.8, "lr": 1e-4, "grad_norm": 0.5, "global_batch": 8,
           "tokens_per_s": 1000.0, "tflops": 0.1, "mfu": 0.25, "step_time_s": 0.2, "memory_gib": 1.0,
           "skipped_iters": 0}
    assert progress_line(rec, 10).startswith("iter 3/10 | samples 24 | loss 3.8000 | lr 1.000e-04")
    assert "MFU 25.0%" in progress_line(rec, 10)


def test_a_non_finite_loss_poisons_every_gradient():
    import torch

    from bloomtrain.parallel.pipeline import LossFn

    fn = LossFn(ParallelState.single())
    labels = (torch.tensor([[1, 2]]), torch.ones(1, 2))
    hidden = torch.randn(1, 2, 4, requires_grad=True)
    weight = torch.randn(8, 4, requires_grad=True)
    fn((hidden, weight), labels).backward()  # the last stage's output: the head's input and the tied weight
    assert torch.isfinite(hidden.grad).all() and torch.isfinite(weight.grad).all()
    # target logits of -inf: the loss is +inf while softmax - onehot stays finite; the guard makes it NaN
    ones = torch.tensor([[[1.0, 0.0, 0.0, 0.0]] * 2], requires_grad=True)
    blocked = weight.detach().clone()
    blocked[1, 0] = blocked[2, 0] = float("-inf")
    blocked.requires_grad_(True)
    loss = fn((ones, blocked), labels)
    loss.backward()
    assert not torch.isfinite(loss) and torch.isnan(ones.grad).all() and torch.isnan(blocked.grad).all()
    # the NaN drill's poisoned loss mask does the same (LossFn itself is stateless)
    from bloomtrain.callbacks.nan_drill import poison

    hidden.grad = weight.grad = None
    _, poisoned = poison((None, labels))
    fn((hidden, weight), poisoned).backward()
    assert torch.isnan(hidden.grad).all() and torch.isnan(weight.grad).all()
