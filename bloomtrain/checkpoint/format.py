"""Model files of a DeepSpeed *pipeline* checkpoint, as Megatron-DeepSpeed wrote BLOOM's, plus the HF key map.

Layout (the whole directory is described in bloomtrain.checkpoint)::

    CKPT/latest                                          the tag, e.g. "global_step1000" (tags.commit_tag)
    CKPT/<tag>/layer_{idx:02d}-model_{tp:02d}-model_states.pt   state_dict of pipeline spec ``idx`` on TP rank tp
    CKPT/<tag>/bloomtrain_model.json                     {"model": ModelConfig, "tp_size", "pp_size"}

Spec indices: 1 = embedding (``word_embeddings.weight``, ``word_embeddings.norm.*``), 3 .. 3+L-1 = blocks,
4+L = final LayerNorm (bare ``weight``/``bias``); the tied head is never saved. Layer files do not
depend on the pipeline degree, so merging needs only the TP rules (transformers'
models/bloom/convert_bloom_original_checkpoint_to_pytorch.py):
TP-duplicated tensors (LayerNorms, row-parallel biases) are averaged, row-parallel weights are
concatenated on dim 1, everything else on dim 0. DeepSpeed's ``mp_rank_*``/optimizer files are the
trainer's business and are not read here. Files are written through bloomdata.durable; writing them
does not move ``latest`` (only ``tags.commit_tag`` does, once every file of the tag is on disk).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections import defaultdict
from pathlib import Path

import torch

from bloomdata import durable
from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import safe_load
from bloomtrain.checkpoint.manifest import MANIFEST_FILE, CheckpointDamaged, verify_tag
from bloomtrain.checkpoint.tags import LATEST, read_latest
from bloomtrain.model.config import ModelConfig, model_config_from

EMBED_INDEX = 1
FIRST_BLOCK_INDEX = 3
METADATA_FILE = "bloomtrain_model.json"
_LAYER_FILE = re.compile(r"layer_(\d+)-model_(\d+)-model_states\.pt")
_ROW_PARALLEL_WEIGHTS = ("self_attention.dense.weight", "mlp.dense_4h_to_h.weight")
log = logging.getLogger(__name__)
_DUPLICATED = ("norm.weight", "norm.bias", "layernorm.weight", "layernorm.bias",
               "self_attention.dense.bias", "mlp.dense_4h_to_h.bias")


def block_index(layer: int) -> int:
    return FIRST_BLOCK_INDEX + layer


def final_norm_index(num_layers: int) -> int:
    return FIRST_BLOCK_INDEX + num_layers + 1


def partition_dim(key: str) -> int | None:
    """How a Meg-DS layer key is sharded over TP: 0, 1, or None (duplicated on every rank)."""
    if key in ("weight", "bias") or key.endswith(_DUPLICATED):
        return None
    return 1 if key.endswith(_ROW_PARALLEL_WEIGHTS) else 0


def stage_indices(num_layers: int, pp_rank: int, pp_size: int) -> list[int]:
    """Spec indices a pipeline stage saves: blocks split evenly (earlier stages take the remainder)."""
    if pp_size > num_layers:
        raise BloomstackError(f"pipeline size {pp_size} exceeds the {num_layers} layers; every stage needs a block")
    per, extra = divmod(num_layers, pp_size)
    start = pp_rank * per + min(pp_rank, extra)
    stop = start + per + (1 if pp_rank < extra else 0)
    indices = [block_index(i) for i in range(start, stop)]
    if pp_rank == 0:
        indices.insert(0, EMBED_INDEX)
    if pp_rank == pp_size - 1:
        indices.append(final_norm_index(num_layers))
    return indices


# --- tensors <-> TP shards ----------------------------------------------------------------------------


def merge_tp(key: str, shards: list[torch.Tensor]) -> torch.Tensor:
    dim = partition_dim(key)
    if dim is not None:
        return torch.cat(shards, dim=dim)
    if all(torch.equal(shards[0], s) for s in shards[1:]):
        return shards[0].clone()  # exact: the round trip HF -> ours -> HF stays bit-identical
    return torch.stack([s.float() for s in shards]).mean(0).to(shards[0].dtype)


def split_tp(key: str, full: torch.Tensor, tp_rank: int, tp_size: int) -> torch.Tensor:
    dim = partition_dim(key)
    if dim is None:
        return full.clone()
    if full.shape[dim] % tp_size:
        raise BloomstackError(f"{key}: dim {dim} of shape {tuple(full.shape)} is not divisible by TP {tp_size}")
    return full.chunk(tp_size, dim=dim)[tp_rank].clone()


def shard_states(full: dict[int, dict[str, torch.Tensor]], config: ModelConfig, tp_rank: int, tp_size: int,
                 pp_rank: int = 0, pp_size: int = 1) -> dict[int, dict[str, torch.Tensor]]:
    """The layer state dicts one (tp, pp) rank holds, sliced from merged (TP=1) layer states."""
    vocab = config.padded_vocab_size(tp_size)
    rows = full[EMBED_INDEX]["word_embeddings.weight"].shape[0]
    if rows != vocab:
        raise BloomstackError(
            f"embedding has {rows} rows but the config pads the vocabulary to {vocab} at TP={tp_size}; "
            "set pad_vocab_size_to to the checkpoint's row count"
        )
    return {
        idx: {key: split_tp(key, t, tp_rank, tp_size) for key, t in full[idx].items()}
        for idx in stage_indices(config.num_layers, pp_rank, pp_size)
    }


# --- our modules <-> layer state dicts ---------------------------------------------------------------


def model_layer_states(model) -> dict[int, dict[str, torch.Tensor]]:
    """Layer state dicts of a single-stage ``BloomModel`` (this rank's TP shards)."""
    states = {EMBED_INDEX: model.embedding.state_dict()}
    for i, block in enumerate(model.blocks):
        states[block_index(i)] = block.state_dict()
    states[final_norm_index(len(model.blocks))] = model.final_norm.state_dict()
    return states


def load_model_layer_states(model, states: dict[int, dict[str, torch.Tensor]], assign: bool = False) -> None:
    """Load this rank's layer state dicts into a single-stage ``BloomModel`` (strict).

    ``assign=True`` adopts the tensors instead of copying (for a model built on the meta device).
    """
    model.embedding.load_state_dict(states[EMBED_INDEX], assign=assign)
    for i, block in enumerate(model.blocks):
        block.load_state_dict(states[block_index(i)], assign=assign)
    model.final_norm.load_state_dict(states[final_norm_index(len(model.blocks))], assign=assign)


# --- files --------------------------------------------------------------------------------------------


def layer_path(ckpt_dir: Path, tag: str, idx: int, tp_rank: int) -> Path:
    return Path(ckpt_dir) / tag / f"layer_{idx:02d}-model_{tp_rank:02d}-model_states.pt"


def save_layer_states(ckpt_dir: Path, tag: str, tp_rank: int, states: dict[int, dict[str, torch.Tensor]],
                      write: durable.Writer = durable.write_with) -> None:
    for idx, sd in states.items():
        path = layer_path(ckpt_dir, tag, idx, tp_rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {k: v.detach().cpu().contiguous() for k, v in sd.items()}
        write(path, functools.partial(torch.save, tensors))


def save_metadata(ckpt_dir: Path, tag: str, config: ModelConfig, tp_size: int, pp_size: int,
                  extra: dict | None = None) -> None:
    """Write the model config next to the layer files (it does not move ``latest``: see tags.commit_tag).

    ``extra``: more JSON facts about the run that wrote the tag (the trainer adds the fused-kernel
    self-check, ``kernel_selfcheck``: which kernels ran fused, on which device and dtype, and why not)."""
    path = Path(ckpt_dir) / tag / METADATA_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    data = metadata_bytes(config, tp_size, pp_size, extra)
    durable.write_with(path, lambda f: f.write(data))


def metadata_bytes(config: ModelConfig, tp_size: int, pp_size: int, extra: dict | None = None) -> bytes:
    """The bytes of ``METADATA_FILE`` (``save_metadata``), for writers that route their own writes (a save's ledger)."""
    meta = {"format_version": 1, "model": config.model_dump(), "tp_size": tp_size, "pp_size": pp_size,
            **(extra or {})}
    return durable.json_text(meta, indent=2).encode("utf-8")


def read_tag(ckpt_dir: Path, tag: str | None = None) -> str:
    if tag is not None:
        return tag
    latest = read_latest(ckpt_dir)
    if latest is None:
        raise BloomstackError(f"{Path(ckpt_dir) / LATEST} not found: {ckpt_dir} is not a checkpoint directory "
                              "(or set tag)", keys=["tag"])
    return latest


def read_config(ckpt_dir: Path, tag: str) -> ModelConfig:
    path = Path(ckpt_dir) / tag / METADATA_FILE
    if not path.is_file():
        raise BloomstackError(
            f"{path} not found: this checkpoint has no bloomtrain model metadata; write it with "
            "bloomtrain.checkpoint.format.save_metadata(ckpt_dir, tag, config, tp, pp)"
        )
    return model_config_from(json.loads(path.read_text())["model"], str(path))


def verify_weights(tag_dir: Path) -> None:
    """Check the layer files and the model metadata against the tag's manifest before any is read: a damaged one
    raises ``CheckpointDamaged`` in one line; a tag without digests (saved before they were recorded) is read
    unverified, with one warning line."""
    verdict = verify_tag(tag_dir, select=lambda name: name == METADATA_FILE or bool(_LAYER_FILE.fullmatch(name)))
    if verdict.damage is not None:
        raise CheckpointDamaged(f"{verdict.damage.line()}; refusing damaged weights: restore the file, or choose an "
                                f"earlier tag (`bloomtrain verify {Path(tag_dir).parent}` says which verify)",
                                keys=["tag"])
    if not verdict.digests:
        log.warning("bloomtrain: %s carries no digests (saved before bloomtrain recorded them in %s, or by "
                    "Megatron-DeepSpeed): reading it unverified", tag_dir, MANIFEST_FILE)


def load_merged_states(ckpt_dir: Path, tag: str | None = None, *,
                       verify: bool = True) -> tuple[ModelConfig, dict[int, dict]]:
    """Read every layer file of a checkpoint (any TP x PP), verified first (``verify_weights``; ``verify=False``:
    the caller did), and merge the TP shards: (config, {idx: sd})."""
    tag = read_tag(ckpt_dir, tag)
    if verify:
        verify_weights(Path(ckpt_dir) / tag)
    config = read_config(ckpt_dir, tag)
    shards: dict[int, dict[int, dict]] = defaultdict(dict)
    for path in sorted((Path(ckpt_dir) / tag).glob("layer_*-model_states.pt")):
        m = _LAYER_FILE.fullmatch(path.name)
        if m:
            shards[int(m[1])][int(m[2])] = safe_load.load(path)
    expected = [EMBED_INDEX, *(block_index(i) for i in range(config.num_layers)), final_norm_index(config.num_layers)]
    missing = [i for i in expected if i not in shards]
    if missing:
        raise BloomstackError(f"{Path(ckpt_dir) / tag}: layer files for spec indices {missing} are missing")
    merged = {}
    for idx in expected:
        tps = sorted(shards[idx])
        if tps != list(range(len(tps))):
            raise BloomstackError(f"{Path(ckpt_dir) / tag}: layer {idx:02d} has TP ranks {tps}; expected 0..N-1")
        parts = [shards[idx][t] for t in tps]
        merged[idx] = {key: merge_tp(key, [p[key] for p in parts]) for key in parts[0]}
    return config, merged


# --- Meg-DS layer keys <-> transformers BloomForCausalLM keys ------------------------------------------


def to_hf_state_dict(merged: dict[int, dict[str, torch.Tensor]], num_layers: int) -> dict[str, torch.Tensor]:
    out = {}
    for idx, sd in merged.items():
        for key, t in sd.items():
            if idx == EMBED_INDEX:
                name = key.replace("word_embeddings.norm.", "word_embeddings_layernorm.")
            elif idx == final_norm_index(num_layers):
                name = f"ln_f.{key}"
            else:
                name = f"h.{idx - FIRST_BLOCK_INDEX}.{key}"
            out[f"transformer.{name}"] = t
    return out


def from_hf_state_dict(hf: dict[str, torch.Tensor], num_layers: int) -> dict[int, dict[str, torch.Tensor]]:
    """HF keys (with or without the ``transformer.`` prefix; ``lm_head`` ignored: it is tied) -> layer states."""
    merged: dict[int, dict[str, torch.Tensor]] = defaultdict(dict)
    for name, t in hf.items():
        name = name.removeprefix("transformer.")
        if name.startswith("lm_head."):
            continue
        if name.startswith("word_embeddings_layernorm."):
            merged[EMBED_INDEX][name.replace("word_embeddings_layernorm.", "word_embeddings.norm.")] = t
        elif name.startswith("word_embeddings."):
            merged[EMBED_INDEX][name] = t
        elif name.startswith("ln_f."):
            merged[final_norm_index(num_layers)][name.removeprefix("ln_f.")] = t
        elif m := re.fullmatch(r"h\.(\d+)\.(.+)", name):
            merged[block_index(int(m[1]))][m[2]] = t
        else:
            raise BloomstackError(f"unexpected tensor {name!r} in a BLOOM state dict")
    return dict(merged)
