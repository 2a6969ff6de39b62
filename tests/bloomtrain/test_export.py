"""Checkpoint layout, export to transformers and import from it.

- A TP=2 x PP=2 checkpoint written shard by shard exports to a BloomForCausalLM whose logits equal ours.
- HF -> ``bloomtrain import`` (TP 2, PP 2) -> ``bloomtrain export`` -> HF is bit-identical.
- Imported shards equal the slices of the unsharded model for any TP.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import format as fmt
from bloomtrain.checkpoint.tags import commit_tag
from bloomtrain.cli import main as cli
from bloomtrain.export import export
from bloomtrain.hf_import import sharded_states
from bloomtrain.model.bloom import BloomModel
from bloomtrain.model.config import ModelConfig
from bloomtrain.parallel.state import ParallelState


def write_sharded_checkpoint(config: ModelConfig, ckpt, tp: int, pp: int, tag: str = "global_step7") -> None:
    """What the trainer's PipelineModule writes: each (pp, tp) rank saves its stage's layer files."""
    for pp_rank in range(pp):
        for tp_rank in range(tp):
            shard = BloomModel(config, ParallelState.offline(tp_rank, tp, pp_rank, pp))
            states = fmt.model_layer_states(shard)
            own = fmt.stage_indices(config.num_layers, pp_rank, pp)
            fmt.save_layer_states(ckpt, tag, tp_rank, {i: states[i] for i in own})
    fmt.save_metadata(ckpt, tag, config, tp, pp)
    commit_tag(ckpt, tag)


def test_stage_indices_cover_bloom_176b_spec():
    stages = [fmt.stage_indices(70, r, 12) for r in range(12)]
    assert stages[0][0] == 1 and stages[-1][-1] == 74
    assert sorted(i for s in stages for i in s) == [1, *range(3, 73), 74]


def test_tp2_pp2_checkpoint_exports_to_transformers(tmp_path, tiny_tokenizer_dir):
    from transformers import AutoTokenizer, BloomForCausalLM

    config = ModelConfig.tiny(num_layers=3, init_std=0.05)
    ckpt = tmp_path / "ckpt"
    write_sharded_checkpoint(config, ckpt, tp=2, pp=2)
    names = sorted(p.name for p in (ckpt / "global_step7").glob("layer_*"))
    assert names[:2] == ["layer_01-model_00-model_states.pt", "layer_01-model_01-model_states.pt"]
    assert names[-1] == "layer_07-model_01-model_states.pt" and len(names) == 2 * 5

    assert cli(["export", str(ckpt), str(tmp_path / "hf"), "--tokenizer", str(tiny_tokenizer_dir)]) == 0
    hf = BloomForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ours = BloomModel(config).eval()  # TP-invariant init: the same weights as the shards
    ids = torch.randint(0, config.vocab_size, (2, 9))
    with torch.no_grad():
        assert (hf(ids).logits - ours(ids)).abs().max() <= 1e-5
    assert hf.config.vocab_size == 256 and hf.config.n_layer == 3

    tok = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert type(tok).__name__ in ("BloomTokenizerFast", "TokenizersBackend", "PreTrainedTokenizerFast")
    assert tok.decode(tok("hello world")["input_ids"]) == "hello world"
    assert hf.config.eos_token_id == tok.convert_tokens_to_ids("</s>")


def test_hf_import_export_round_trip_is_bit_identical(tmp_path, hf_bloom, tiny_tokenizer_dir):
    hf = hf_bloom(n_head=6, n_layer=3)
    hf.save_pretrained(tmp_path / "hf")
    for f in tiny_tokenizer_dir.iterdir():
        (tmp_path / "hf" / f.name).write_bytes(f.read_bytes())

    assert cli(["import", str(tmp_path / "hf"), "--out", str(tmp_path / "ckpt"), "--tp", "2", "--pp", "2"]) == 0
    assert (tmp_path / "ckpt" / "tokenizer.json").is_file()
    assert cli(["export", str(tmp_path / "ckpt"), str(tmp_path / "back")]) == 0

    original = load_file(tmp_path / "hf" / "model.safetensors")
    back = load_file(tmp_path / "back" / "model.safetensors")
    original = {k if k.startswith("transformer.") else f"transformer.{k}": v for k, v in original.items()
                if not k.startswith("lm_head")}
    assert original.keys() == back.keys()
    for key, tensor in original.items():
        assert back[key].dtype == tensor.dtype and torch.equal(back[key], tensor), key
    exported = json.loads((tmp_path / "back" / "config.json").read_text())
    assert (exported["n_head"], exported["n_layer"], exported["vocab_size"]) == (6, 3, 256)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_import_shards_are_slices_of_the_unsharded_model(tmp_path, hf_bloom, tp):
    hf = hf_bloom(n_head=12, n_layer=2)
    hf.save_pretrained(tmp_path)
    _, unsharded = sharded_states(tmp_path, ParallelState.single())
    for rank in range(tp):
        config, shards = sharded_states(tmp_path, ParallelState.offline(rank, tp))
        model = BloomModel(config, ParallelState.offline(rank, tp))
        fmt.load_model_layer_states(model, shards)  # strict: every key present, every shape right
        qkv = shards[fmt.block_index(1)]["self_attention.query_key_value.weight"]
        assert torch.equal(qkv, unsharded[fmt.block_index(1)]["self_attention.query_key_value.weight"].chunk(tp)[rank])
        dense = shards[fmt.block_index(0)]["self_attention.dense.weight"]
        assert dense.shape == (96, 96 // tp)


def test_export_errors_name_the_problem(tmp_path, capsys):
    with pytest.raises(BloomstackError, match="latest"):
        export(tmp_path, tmp_path / "out")
    assert cli(["export", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "not a checkpoint directory" in capsys.readouterr().err


def test_export_refuses_a_damaged_checkpoint_in_one_line(tmp_path, hf_bloom, capsys):
    """The import records digests like a training save; one flipped byte in a layer file and the export stops before
    writing anything: no weights, no model card."""
    hf_bloom(n_head=6, n_layer=2).save_pretrained(tmp_path / "hf")
    ckpt = tmp_path / "ckpt"
    assert cli(["import", str(tmp_path / "hf"), "--out", str(ckpt), "--tp", "2"]) == 0
    assert cli(["verify", str(ckpt)]) == 0
    assert "global_step0: ok (" in capsys.readouterr().out
    layer = ckpt / "global_step0" / "layer_03-model_01-model_states.pt"
    data = bytearray(layer.read_bytes())
    data[-100] ^= 0x80
    layer.write_bytes(data)

    assert cli(["export", str(ckpt), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"bloomtrain export: error: {layer}: damaged (content): its xxh3-128 "
                                               "digest is "), err
    assert err[0].endswith(f"; refusing damaged weights: restore the file, or choose an earlier --tag (`bloomtrain "
                           f"verify {ckpt}` says which verify)"), err
    assert not (tmp_path / "out").exists()  # no weights, no README.md model card, no config.json
    assert cli(["verify", str(ckpt)]) == 1
