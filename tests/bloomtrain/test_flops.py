"""The FLOPs behind every TFLOP/s and MFU figure (bloomtrain.metrics.flops_per_iteration) against a count of the
matmuls our model actually runs (torch.utils.flop_counter over forward + loss + backward).

Megatron's formula (Narayanan et al. 2021, eq. 3, as Megatron-DeepSpeed's throughput_calculator logs it) counts,
per layer, 24 B s h^2 for the QKV, output and MLP projections plus 4 B s^2 h for the two attention products (the
full square), times f = 3 for forward + backward. The logits are where it is approximate on purpose: its term
V / (16 l h) gives them 24 f B s h V / 16 = 4.5 B s h V FLOPs at f = 3, where their forward and backward cost
6 B s h V. So the counted FLOPs are the formula's plus exactly 1.5 B s h V, and a gpu-check figure is
comparable with Megatron's logs because it uses the same formula, not the exact count.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bloomtrain.metrics import flops_per_iteration
from bloomtrain.model.bloom import BloomModel
from bloomtrain.model.config import ModelConfig


@pytest.mark.parametrize(("layers", "hidden", "heads", "seq", "vocab", "batch"),
                         [(2, 64, 4, 32, 256, 2), (3, 96, 12, 48, 384, 3)])
def test_megatrons_formula_against_the_counted_matmuls(layers, hidden, heads, seq, vocab, batch):
    config = ModelConfig(num_layers=layers, hidden_size=hidden, num_heads=heads, seq_length=seq, vocab_size=vocab,
                         pad_vocab_size_to=vocab, kernels="torch", hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    model = BloomModel(config)
    ids = torch.randint(0, vocab, (batch, seq + 1))
    with FlopCounterMode(display=False) as counter:
        model.loss(model(ids[:, :-1]), ids[:, 1:]).backward()
    b, s, h, v = batch, seq, hidden, vocab
    forward = layers * (24 * b * s * h * h + 4 * b * s * s * h) + 2 * b * s * h * v
    assert counter.get_total_flops() == 3 * forward
    formula = flops_per_iteration(config, batch, tp=1, recompute=False)
    assert counter.get_total_flops() - formula == pytest.approx(1.5 * b * s * h * v, rel=1e-12)
    # activation checkpointing: one more forward of everything (Megatron's f = 4)
    assert flops_per_iteration(config, batch, tp=1, recompute=True) == pytest.approx(formula * 4 / 3, rel=1e-12)
