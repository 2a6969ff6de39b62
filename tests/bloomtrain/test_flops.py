"""The FLOPs behind every TFLOP/s and MFU figure (bloomtrain.metrics), as Megatron-LM counts them: against a hand
count of bloom-560m's matmuls, and against torch.utils.flop_counter over forward + loss + backward of our model.

Megatron-LM's ``num_floating_point_operations`` (megatron/training/training.py) counts, per token and for BLOOM's
shape, ``l (72 h^2 + 6 h s) + 6 h V``: every GEMM three times (forward, data gradient, weight gradient), two FLOPs
per multiply-add, and the two attention products over half the square (the causal mask). Our PyTorch reference
attention multiplies the whole square, so torch's count is the formula's plus exactly ``3 * l * 2 * B s^2 h``.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from bloomtrain.config import load_config
from bloomtrain.metrics import Metrics, flops_per_iteration, flops_per_token
from bloomtrain.model.bloom import BloomModel
from bloomtrain.model.config import ModelConfig
from tests.bloomtrain.train_helpers import TINY


def test_bloom_560m_against_a_hand_count_of_its_matmuls():
    h, ffn, s, layers, vocab = 1024, 4096, 2048, 24, 250880  # bloom-560m at TP 1 (its vocabulary padded)
    # multiply-adds of one token's forward, GEMM by GEMM: fused QKV, attention output, MLP in and out; the query
    # of the token against s / 2 keys on average (causal) in QK^T and again in P V, over all heads (h = np * hd)
    per_layer = h * 3 * h + h * h + h * ffn + ffn * h + h * s // 2 + h * s // 2
    forward = 2 * (layers * per_layer + h * vocab)  # + the tied head's logits
    model = ModelConfig(preset="bloom-560m")
    assert flops_per_token(model, tp=1, recompute=False) == 3 * forward == 3_655_335_936
    # activation checkpointing recomputes each block's forward once more (not the head): hardware FLOPs
    assert flops_per_token(model, tp=1, recompute=True) == 3 * forward + 2 * layers * per_layer == 4_359_979_008
    assert flops_per_iteration(model, 16, 1, False) == 3_655_335_936 * 16 * 2048  # the recipe's 16 x 2048 tokens


def _counted(config: ModelConfig, batch: int, device: str = "cpu") -> int:
    """torch's count of forward + loss + backward of our model (PyTorch kernels: every matmul visible)."""
    torch.manual_seed(0)
    model = BloomModel(config, device=device)
    model.embedding.word_embeddings.sparse_grad = False  # the sparse gradient's coalesce has no meta kernel
    for attention in (block.self_attention for block in model.blocks):
        attention.slopes = attention.slopes.to(device)  # a meta model keeps its slopes on the CPU
    ids = torch.randint(0, config.vocab_size, (batch, config.seq_length + 1)).to(device)
    with FlopCounterMode(display=False) as counter:
        model.loss(model(ids[:, :-1]), ids[:, 1:]).backward()
    return counter.get_total_flops()


def test_bloom_560m_against_torchs_count_on_the_meta_device():
    """The real shape, counted without computing: the difference is the upper triangle our attention multiplies."""
    config = ModelConfig(preset="bloom-560m", kernels="torch", hidden_dropout=0.0, attention_dropout=0.0)
    h, s, layers = config.hidden_size, config.seq_length, config.num_layers
    assert _counted(config, 1, "meta") - flops_per_iteration(config, 1, 1, False) == 3 * layers * 2 * s * s * h


@pytest.mark.parametrize(("layers", "hidden", "heads", "seq", "vocab", "batch"),
                         [(2, 64, 4, 32, 256, 2), (3, 96, 12, 48, 384, 3)])
def test_megatron_lms_count_against_the_counted_matmuls(layers, hidden, heads, seq, vocab, batch):
    config = ModelConfig(num_layers=layers, hidden_size=hidden, num_heads=heads, seq_length=seq, vocab_size=vocab,
                         pad_vocab_size_to=vocab, kernels="torch", hidden_dropout=0.0, attention_dropout=0.0)
    b, s, h, v = batch, seq, hidden, vocab
    counted = _counted(config, batch)
    assert counted == 3 * (layers * (24 * b * s * h * h + 4 * b * s * s * h) + 2 * b * s * h * v)
    model_flops = flops_per_iteration(config, batch, tp=1, recompute=False)
    assert counted - model_flops == 3 * layers * 2 * b * s * s * h  # the causal half our attention computes anyway
    # activation checkpointing: one more forward of every block (a third of its forward + backward), not the head
    blocks = model_flops - 6 * b * s * h * v
    assert flops_per_iteration(config, batch, tp=1, recompute=True) == pytest.approx(model_flops + blocks / 3,
                                                                                   rel=1e-12)


def test_the_trainers_throughput_reports_model_and_hardware_flops():
    """metrics.jsonl's figures: model FLOPs in tflops/mfu, the recomputed forwards too in hw_tflops/hfu."""
    for recompute in (False, True):
        cfg = load_config(TINY, ["logging.peak_tflops=100", f"parallel.activation_checkpointing={recompute}"])
        figures = Metrics(cfg, rank=1, world_size=2).throughput(global_batch=8, step_time=0.5)
        tp, model = cfg.parallel.tp, cfg.model
        expect = flops_per_iteration(model, 8, tp, False) / (0.5 * 2 * 1e12)
        hardware = flops_per_iteration(model, 8, tp, recompute) / (0.5 * 2 * 1e12)
        assert figures["tflops"] == pytest.approx(expect) and figures["mfu"] == pytest.approx(expect / 100)
        assert figures["hw_tflops"] == pytest.approx(hardware) and figures["hfu"] == pytest.approx(hardware / 100)
        assert (figures["hw_tflops"] > figures["tflops"]) is recompute
