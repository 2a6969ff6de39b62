"""The TP=1 model against transformers' BloomForCausalLM (same weights), plus config and init rules."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import format as fmt
from bloomtrain.hf_import import config_from_hf
from bloomtrain.model.alibi import alibi_slopes, local_alibi_slopes
from bloomtrain.model.bloom import BloomModel
from bloomtrain.model.config import PRESETS, ModelConfig, model_config_from

ROOT = Path(__file__).resolve().parents[2]


def ours_from_hf(hf) -> BloomModel:
    config = config_from_hf(hf.config.to_dict())
    model = BloomModel(config).eval()
    fmt.load_model_layer_states(model, fmt.from_hf_state_dict(hf.state_dict(), config.num_layers))
    return model


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6, 8, 12, 16, 24, 112])
def test_alibi_slopes_match_transformers(n):
    from transformers.models.bloom.modeling_bloom import _get_alibi_slopes

    torch.testing.assert_close(alibi_slopes(n), _get_alibi_slopes(n, torch.device("cpu")), rtol=1e-6, atol=0)


def test_alibi_slopes_bloom_176b_values_and_tp_slices():
    s = alibi_slopes(112)
    expected = {0: 2 ** (-1 / 8), 63: 2**-8, 64: 2 ** (-1 / 16), 111: 2 ** (-95 / 16)}
    for head, value in expected.items():
        assert math.isclose(s[head], value, rel_tol=1e-6), head
    assert torch.equal(torch.cat([local_alibi_slopes(112, r, 4) for r in range(4)]), s)


def test_vocab_padding_rule():
    bloom = ModelConfig.bloom_176b()
    assert [bloom.padded_vocab_size(tp) for tp in (1, 2, 4, 8)] == [250880] * 4
    megatron = ModelConfig.bloom_176b(pad_vocab_size_to=None)
    assert [megatron.padded_vocab_size(tp) for tp in (1, 2, 4, 8)] == [250752, 250880, 250880, 250880]
    assert ModelConfig.tiny(pad_vocab_size_to=None).padded_vocab_size(4) == 512
    with pytest.raises(ValueError, match="smaller than"):  # a validator's ValueError: the loader places it
        ModelConfig.tiny(pad_vocab_size_to=128)
    with pytest.raises(BloomstackError, match=r"^ckpt/bloomtrain_model.json: pad_vocab_size_to: pad_vocab_size_to"
                                              r"=128 is smaller than vocab_size=250"):
        model_config_from(ModelConfig.tiny().model_dump() | {"pad_vocab_size_to": 128}, "ckpt/bloomtrain_model.json")
    with pytest.raises(BloomstackError, match="not divisible by tensor-parallel size 3"):
        ModelConfig.tiny().padded_vocab_size(3)


def test_presets_match_published_parameter_counts():
    # bigscience/bloom-* model cards; 176B from l(12h^2+13h)+Vh+4h (docs/bloom-training.md, "Model sizes").
    expected = {"bloom-560m": 559_214_592, "bloom-1b1": 1_065_314_304, "bloom-1b7": 1_722_408_960,
                "bloom-3b": 3_002_557_440, "bloom-7b1": 7_069_016_064, "bloom-176b": 176_247_271_424}
    for name, count in expected.items():
        cfg = PRESETS[name]()
        assert cfg.num_parameters() == count, name
        assert (cfg.init_std, cfg.layernorm_eps) == (0.0048, 1e-5)


def _padded_batch(vocab: int, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (3, 12), generator=g)
    mask = torch.ones(3, 12, dtype=torch.long)
    mask[1, 8:] = 0  # right padding
    mask[2, :5] = 0  # left padding
    return ids, mask


@pytest.mark.parametrize("n_head", [12, 6])  # 12 and 6: non-power-of-two ALiBi
def test_logits_match_transformers(hf_bloom, n_head):
    hf = hf_bloom(n_head=n_head)
    ours = ours_from_hf(hf)
    ids, mask = _padded_batch(256)
    with torch.no_grad():
        diff = (ours(ids) - hf(ids).logits).abs().max()
        assert diff <= 1e-5, f"unpadded: max abs diff {diff}"
        ours_m, hf_m = ours(ids, mask), hf(ids, attention_mask=mask).logits
    # Real tokens of right- and left-padded rows match; so do pad rows (both see the same keys).
    assert (ours_m - hf_m)[mask.bool()].abs().max() <= 1e-5
    assert (ours_m - hf_m).abs().max() <= 1e-5
    assert (ours_m[0] - hf_m[0]).abs().max() <= 1e-5


def test_loss_and_loss_mask_match_torch_cross_entropy(hf_bloom):
    hf = hf_bloom()
    ours = ours_from_hf(hf)
    ids, mask = _padded_batch(256, seed=2)
    labels = torch.roll(ids, -1, dims=1)
    loss = ours.loss(ours(ids, mask), labels, mask)
    ref = F.cross_entropy(hf(ids, attention_mask=mask).logits[mask.bool()].float(), labels[mask.bool()])
    torch.testing.assert_close(loss, ref, rtol=1e-5, atol=0)


def test_tied_embedding_gradient_is_dense_and_equals_the_dense_lookup(hf_bloom):
    # BloomModel's lookup returns sparse rows that autograd adds into the head's dense gradient; the
    # result must be a dense .grad equal to the plain lookup's, also when micro-batches accumulate.
    ids, mask = _padded_batch(256, seed=4)
    labels = torch.roll(ids, -1, dims=1)
    grads = {}
    for sparse in (True, False):
        model = ours_from_hf(hf_bloom()).train()
        model.embedding.word_embeddings.sparse_grad = sparse
        for micro in range(2):
            model.loss(model(ids[micro::2], mask[micro::2]), labels[micro::2], mask[micro::2]).backward()
        grads[sparse] = model.embedding.word_embeddings.weight.grad
    assert grads[True].layout == torch.strided
    torch.testing.assert_close(grads[True], grads[False], rtol=1e-5, atol=1e-7)
    assert grads[True].abs().sum() > 0


def test_kv_cache_decoding_equals_full_forward(hf_bloom):
    ours = ours_from_hf(hf_bloom(n_head=6))
    ids, _ = _padded_batch(256, seed=3)
    with torch.no_grad():
        full = ours(ids)
        cache = ours.new_cache()
        steps = [ours(ids[:, :5], cache=cache)] + [ours(ids[:, i : i + 1], cache=cache) for i in range(5, 12)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-5)


def test_init_std_scaled_output_and_layernorms():
    cfg = ModelConfig.tiny(hidden_size=256, num_heads=4, num_layers=8, init_std=0.0048)
    model = BloomModel(cfg)
    block = model.blocks[3]
    std = block.mlp.dense_h_to_4h.weight.std().item()
    out_std = block.mlp.dense_4h_to_h.weight.std().item()
    assert abs(std - 0.0048) / 0.0048 < 0.02
    assert abs(out_std - 0.0048 / 4) / (0.0048 / 4) < 0.02  # sqrt(2 * 8) = 4
    assert abs(block.self_attention.dense.weight.std().item() - 0.0012) / 0.0012 < 0.03
    assert torch.equal(block.input_layernorm.weight, torch.ones(256))
    assert torch.equal(model.embedding.word_embeddings.norm.bias, torch.zeros(256))
    assert torch.equal(block.self_attention.query_key_value.bias, torch.zeros(3 * 256))
    # Seeded by (init_seed, global name): same seed same weights, different layers differ.
    again = BloomModel(cfg)
    assert torch.equal(again.blocks[3].mlp.dense_h_to_4h.weight, block.mlp.dense_h_to_4h.weight)
    assert not torch.equal(model.blocks[2].mlp.dense_h_to_4h.weight, block.mlp.dense_h_to_4h.weight)


def test_dropout_is_configurable():
    ids = torch.randint(0, 250, (2, 8))
    plain = BloomModel(ModelConfig.tiny()).train()
    assert torch.equal(plain(ids), plain(ids))
    dropped = BloomModel(ModelConfig.tiny(hidden_dropout=0.1, attention_dropout=0.1)).train()
    assert not torch.equal(dropped(ids), dropped(ids))
    dropped.eval()
    assert torch.equal(dropped(ids), plain.eval()(ids))


def test_model_code_imports_no_deepspeed():
    # parallel/pipeline.py (the PipelineModule wrapper) may import deepspeed; the model and TP layers may not,
    # except state.py's lazy import inside from_topology.
    tp_files = ("state", "mappings", "layers", "cross_entropy", "init")
    paths = [*(ROOT / "bloomtrain/model").glob("*.py"), *(ROOT / f"bloomtrain/parallel/{f}.py" for f in tp_files)]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                lazy_ok = path.name == "state.py" and node.col_offset > 0
                assert lazy_ok or not any(n.split(".")[0] == "deepspeed" for n in names), path


def test_the_embedding_reads_no_device_ids_and_checks_cpu_ids():
    """Ids on a device are checked on the host before the copy (bloomtrain.data.to_device): the lookup must not
    read them back, a host sync per micro-batch. Meta tensors have no values, so reading one would raise here."""
    from bloomtrain.parallel.layers import VocabParallelEmbedding
    from bloomtrain.parallel.state import ParallelState

    on_meta = VocabParallelEmbedding(256, 8, ParallelState.single(), device="meta")
    out = on_meta(torch.tensor([[0, 255, 7]]).to("meta"))
    assert out.shape == (1, 3, 8) and out.device.type == "meta"
    with pytest.raises(BloomstackError, match=r"^token id out of range \[0, 256\): min 3, max 256; the data was "):
        VocabParallelEmbedding(256, 8, ParallelState.single())(torch.tensor([[3, 256]]))
