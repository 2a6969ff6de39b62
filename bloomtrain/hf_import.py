"""``bloomtrain import HF_DIR --out CKPT --tp N [--pp M]``: a transformers BLOOM checkpoint -> our layout.

Reads ``config.json`` and the weights (``model.safetensors``, a sharded ``*.safetensors.index.json`` or
``pytorch_model*.bin``) of a ``BloomForCausalLM`` directory, maps HF keys to Megatron-DeepSpeed layer keys
(bloomtrain.checkpoint.format) and slices them for any TP degree. The CLI writes a pipeline checkpoint
(tag ``global_step0``) plus the model metadata and the tokenizer files, ready for continued pretraining;
``sharded_states`` returns the same shards in memory for one ``ParallelState``.

The embedding keeps every HF row: the config's ``pad_vocab_size_to`` is set to the HF ``vocab_size``
(250880 for the released models), which must be divisible by TP.
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import torch

from bloomdata import durable
from bloomdata.disk import disk_full, raising_disk_full
from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import format as fmt
from bloomtrain.checkpoint.manifest import SaveLedger, write_manifest
from bloomtrain.checkpoint.tags import commit_tag
from bloomtrain.model.config import ModelConfig, model_config_from
from bloomtrain.parallel.state import ParallelState

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                   "merges.txt")


def config_from_hf(hf: dict) -> ModelConfig:
    """ModelConfig from a BLOOM ``config.json`` dict."""
    if hf.get("apply_residual_connection_post_layernorm"):
        raise BloomstackError("config.json: apply_residual_connection_post_layernorm=true is not BLOOM's layout")
    vocab = hf["vocab_size"]
    return model_config_from(dict(
        num_layers=hf.get("n_layer", hf.get("num_hidden_layers")),
        hidden_size=hf.get("hidden_size", hf.get("n_embed")),
        num_heads=hf.get("n_head", hf.get("num_attention_heads")),
        vocab_size=vocab,
        pad_vocab_size_to=vocab,
        make_vocab_size_divisible_by=128 if vocab % 128 == 0 else 1,
        seq_length=hf.get("seq_length", 2048),
        layernorm_eps=hf.get("layer_norm_epsilon", 1e-5),
        init_std=hf.get("initializer_range", 0.02),
        hidden_dropout=hf.get("hidden_dropout", 0.0),
        attention_dropout=hf.get("attention_dropout", 0.0),
    ), "config.json")


def read_hf_weights(hf_dir: Path) -> dict[str, torch.Tensor]:
    hf_dir = Path(hf_dir)
    from safetensors.torch import load_file  # noqa: PLC0415

    if (hf_dir / "model.safetensors").is_file():
        return load_file(hf_dir / "model.safetensors")
    index = hf_dir / "model.safetensors.index.json"
    if index.is_file():
        out = {}
        for name in sorted(set(json.loads(index.read_text())["weight_map"].values())):
            out.update(load_file(hf_dir / name))
        return out
    bins = sorted(hf_dir.glob("pytorch_model*.bin"))
    if bins:
        out = {}
        for path in bins:
            out.update(torch.load(path, map_location="cpu", weights_only=True))
        return out
    raise BloomstackError(f"{hf_dir}: no model.safetensors, safetensors index or pytorch_model*.bin found")


def read_hf_dir(hf_dir: Path) -> tuple[ModelConfig, dict[int, dict[str, torch.Tensor]]]:
    """(config, merged layer states) of a transformers BLOOM directory."""
    path = Path(hf_dir) / "config.json"
    if not path.is_file():
        raise BloomstackError(f"{path} not found: pass a BloomForCausalLM directory (save_pretrained output)")
    config = config_from_hf(json.loads(path.read_text()))
    merged = fmt.from_hf_state_dict(read_hf_weights(hf_dir), config.num_layers)
    return config, merged


def sharded_states(hf_dir: Path, state: ParallelState) -> tuple[ModelConfig, dict[int, dict[str, torch.Tensor]]]:
    """The layer states (spec index -> state dict) that ``state``'s TP rank and PP stage hold."""
    config, merged = read_hf_dir(hf_dir)
    return config, fmt.shard_states(merged, config, state.tp_rank, state.tp_size, state.pp_rank, state.pp_size)


def copy_tokenizer_files(src: Path, dst: Path) -> list[str]:
    """Copy the tokenizer files present in ``src`` to ``dst``, each atomically (bloomdata.durable)."""
    copied = []
    for name in TOKENIZER_FILES:
        if (Path(src) / name).is_file():
            Path(dst).mkdir(parents=True, exist_ok=True)
            with open(Path(src) / name, "rb") as source:
                durable.write_with(Path(dst) / name, functools.partial(shutil.copyfileobj, source))
            copied.append(name)
    return copied


def import_hf(hf_dir: Path, out: Path, tp_size: int, pp_size: int = 1, dtype: torch.dtype | None = None,
              tag: str = "global_step0") -> ModelConfig:
    """Write a TP x PP checkpoint of an HF BLOOM directory, with its manifest of digests; returns its config."""
    config, merged = read_hf_dir(hf_dir)
    if dtype is not None:
        merged = {i: {k: v.to(dtype) for k, v in sd.items()} for i, sd in merged.items()}
    ledger = SaveLedger(Path(out) / tag, rank=0)  # digests every file; on a full disk, counts what was needed
    for pp_rank in range(pp_size):
        for tp_rank in range(tp_size):
            shard = fmt.shard_states(merged, config, tp_rank, tp_size, pp_rank, pp_size)
            fmt.save_layer_states(out, tag, tp_rank, shard, ledger.write)
    meta = fmt.metadata_bytes(config, tp_size, pp_size)
    ledger.write(Path(out) / tag / fmt.METADATA_FILE, lambda f: f.write(meta))
    write_manifest(Path(out) / tag, dict(ledger.files), ledger.write)
    then = "run the same command again"
    if ledger.full is not None:
        shutil.rmtree(Path(out) / tag, ignore_errors=True)
        raise disk_full(out, f"importing {hf_dir}", ledger.needed, then=then, key="out_dir")
    with raising_disk_full(f"importing {hf_dir}", then=then, folder=out, key="out_dir"):
        copy_tokenizer_files(hf_dir, out)
        commit_tag(out, tag)  # last: every file of the tag is on disk
    return config

