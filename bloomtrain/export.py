"""``bloomtrain export CHECKPOINT OUT_DIR``: a checkpoint of any TP x PP layout -> a BloomForCausalLM directory.

Reads the layer files and the model metadata (bloomtrain.checkpoint.format), merges the TP shards by
the HF converter's rules (duplicated tensors averaged, or taken as-is when all copies are equal, which
keeps HF -> import -> export bit-identical; row-parallel weights concatenated on dim 1; the rest on
dim 0), renames to transformers keys and writes ``config.json``, ``model.safetensors`` (the checkpoint's
dtype unless ``--dtype``), the tokenizer files found in the checkpoint directory or ``--tokenizer``,
``provenance.json`` (what the model was made from: bloomtrain.provenance) and the model card, ``README.md`` with
its images (bloomtrain.card, from the run's records and the ``CardConfig`` fields). The embedding keeps all padded
rows, as the released BLOOM checkpoints do (vocab_size 250880).

Every file is written through bloomdata.durable (atomic, fsynced), ``config.json`` last and its old
version removed first: a directory with a ``config.json`` holds a complete export, card included, never new
weights beside an old config or the reverse.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from bloomdata import durable
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomtrain.card import CARD_FILE, load_records, write_model_card
from bloomtrain.checkpoint import format as fmt
from bloomtrain.config import CardConfig, ExportConfig
from bloomtrain.environment import EXPORT_PACKAGES, software_versions
from bloomtrain.hf_import import copy_tokenizer_files
from bloomtrain.model.config import ModelConfig
from bloomtrain.provenance import ExportRecord, checkpoint_provenance, write_provenance

_BLOOM_SPECIAL_IDS = {"bos_token": 1, "eos_token": 2, "pad_token": 3}  # bigscience/tokenizer


def special_token_ids(tokenizer_dir: Path | None) -> dict[str, int | None]:
    """bos/eos/pad ids from tokenizer_config.json + tokenizer.json, else BLOOM's (1, 2, 3)."""
    ids: dict[str, int | None] = dict(_BLOOM_SPECIAL_IDS)
    if tokenizer_dir is None or not (Path(tokenizer_dir) / "tokenizer.json").is_file():
        return ids
    from tokenizers import Tokenizer  # noqa: PLC0415

    tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    cfg_path = Path(tokenizer_dir) / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text()) if cfg_path.is_file() else {}
    for name in ids:
        token = cfg.get(name)
        token = token.get("content") if isinstance(token, dict) else token
        ids[name] = tok.token_to_id(token) if token else None
    return ids


def hf_config(config: ModelConfig, vocab_rows: int, dtype: torch.dtype, special: dict[str, int | None]) -> dict:
    dtype_name = str(dtype).removeprefix("torch.")
    return {
        "architectures": ["BloomForCausalLM"],
        "model_type": "bloom",
        "vocab_size": vocab_rows,
        "hidden_size": config.hidden_size,
        "n_layer": config.num_layers,
        "n_head": config.num_heads,
        "layer_norm_epsilon": config.layernorm_eps,
        "initializer_range": config.init_std,
        "hidden_dropout": config.hidden_dropout,
        "attention_dropout": config.attention_dropout,
        "apply_residual_connection_post_layernorm": False,
        "pretraining_tp": 1,
        "slow_but_exact": False,
        "tie_word_embeddings": True,
        "use_cache": True,
        "seq_length": config.seq_length,
        "bos_token_id": special["bos_token"],
        "eos_token_id": special["eos_token"],
        "pad_token_id": special["pad_token"],
        "dtype": dtype_name,
        "torch_dtype": dtype_name,  # the key transformers 4.x reads
    }


def write_weights(config: ModelConfig, merged: dict[int, dict], out_dir: Path,
                  dtype: torch.dtype | None) -> tuple[int, torch.dtype]:
    """model.safetensors of the merged TP shards (``fmt.load_merged_states``) in ``dtype`` (default: the
    checkpoint's); returns the embedding rows and the dtype written."""
    from safetensors.torch import save_file  # noqa: PLC0415

    state = fmt.to_hf_state_dict(merged, config.num_layers)
    dtype = dtype or state["transformer.word_embeddings.weight"].dtype
    state = {k: v.to(dtype).contiguous() for k, v in state.items()}
    durable.write_with_path(out_dir / "model.safetensors",
                            lambda tmp: save_file(state, tmp, metadata={"format": "pt"}))
    return state["transformer.word_embeddings.weight"].shape[0], dtype


def export(ckpt_dir: Path, out_dir: Path, *, tag: str | None = None, tokenizer_dir: Path | None = None,
           dtype: torch.dtype | None = None, card: CardConfig | None = None) -> Path:
    """Write ``out_dir`` as a BloomForCausalLM directory with its provenance.json and model card; returns it.

    The card's records are loaded first, so a card setting that names a missing record fails before any work; the
    weights are read (verified against the checkpoint's digests) before anything is written, so a damaged
    checkpoint leaves ``out_dir`` as it was."""
    ckpt_dir, out_dir = Path(ckpt_dir), Path(out_dir)
    fmt.verify_weights(ckpt_dir / fmt.read_tag(ckpt_dir, tag))  # before any file of it is read, the metadata included
    provenance = checkpoint_provenance(ckpt_dir, tag, card or CardConfig())
    records = load_records(provenance, out_dir)
    config, merged = fmt.load_merged_states(ckpt_dir, provenance.tag, verify=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").unlink(missing_ok=True)  # the commit file: absent until every other file is new
    rows, dtype = write_weights(config, merged, out_dir, dtype)

    source = tokenizer_dir or ckpt_dir
    copied = copy_tokenizer_files(source, out_dir)
    if tokenizer_dir is not None and not copied:
        raise BloomstackError(f"tokenizer {tokenizer_dir}: no tokenizer.json or tokenizer_config.json there",
                              keys=["tokenizer"])
    record = ExportRecord(dtype=str(dtype).removeprefix("torch."), embedding_rows=rows,
                          tokenizer=str(Path(source).resolve()) if copied else None,
                          software=software_versions(EXPORT_PACKAGES))
    records.provenance = derive(provenance, export=record)
    write_provenance(out_dir, records.provenance)
    write_model_card(records, out_dir, out_dir / CARD_FILE)
    config_json = hf_config(config, rows, dtype, special_token_ids(source if copied else None))
    durable.write_json(out_dir / "config.json", config_json, indent=2)
    return out_dir


def run_export(config: ExportConfig) -> Path:
    """``export`` for an ``ExportConfig``: the model of ``bloomtrain export`` and of the flows' export stage."""
    return export(Path(config.checkpoint), Path(config.out_dir), tag=config.tag,
                  tokenizer_dir=Path(config.tokenizer) if config.tokenizer else None,
                  dtype=getattr(torch, config.dtype) if config.dtype else None, card=config.card_settings())
