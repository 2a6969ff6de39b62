"""Megatron-DeepSpeed's client state in ``mp_rank_*_model_states.pt``: written with ours, and enough to resume.

BigScience's Megatron-DeepSpeed (``megatron/checkpointing.py``, ``save_checkpoint``) hands DeepSpeed this
client state, which DeepSpeed stores in every ``mp_rank_*`` file (one per TP x PP rank, written by DP rank 0)::

    args                argparse.Namespace: its command line plus consumed_train_samples, consumed_train_tokens,
                        padded_vocab_size, world_size, data_parallel_size, ...
    checkpoint_version  3.0
    iteration           optimizer iterations done
    tokens              training tokens consumed (samples x sequence length)
    checkpoint_info     {"padded_vocab_size": embedding rows, "original_vocab_size": tokenizer vocabulary}
    random_rng_state, np_rng_state, torch_rng_state, cuda_rng_state    the saving rank's RNG (rng.py)

Readers: its ``tools/convert_checkpoint/ds_to_universal.py`` (``checkpoint_info["original_vocab_size"]``),
``deepspeed_to_megatron.py`` (sets attributes of ``args``), and DeepSpeed's ``DeepSpeedCheckpoint``
(``get_iteration``, ``get_args``, ``get_checkpoint_info``). bloomtrain writes these keys next to its own
(``bloomtrain``: the trainer position; ``train_config``) and resumes a checkpoint that has only them, as
Megatron-DeepSpeed wrote BLOOM's: position from ``iteration`` and ``args.consumed_train_samples``, layout
and model shape from ``args``. ``args.position_embedding_type`` is written as the string ``"alibi"``
(Megatron's enum cannot be pickled where Megatron is not installed); Megatron's enum reads back as
safe_load.PositionEmbeddingType.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import safe_load
from bloomtrain.checkpoint.rng import rng_state
from bloomtrain.config import TrainConfig
from bloomtrain.model.config import ModelConfig
from bloomtrain.parallel.state import ParallelState

CHECKPOINT_VERSION = 3.0
MP_RANK_00 = "mp_rank_00_model_states.pt"
# Megatron's argument name for each ModelConfig field that fixes the shape of the weights
SHAPE_ARGS = {"num_layers": "num_layers", "hidden_size": "hidden_size", "num_heads": "num_attention_heads"}


def client_state(cfg: TrainConfig, position: dict[str, int], state: ParallelState) -> dict[str, Any]:
    """Megatron-DeepSpeed's client state for a save at ``position`` (Trainer.Position.as_dict())."""
    model = cfg.model
    return {
        "args": megatron_args(cfg, position, state),
        "checkpoint_version": CHECKPOINT_VERSION,
        "iteration": position["iteration"],
        "tokens": position["consumed_samples"] * model.seq_length,
        "checkpoint_info": {"padded_vocab_size": model.padded_vocab_size(state.tp_size),
                            "original_vocab_size": model.vocab_size},
        **rng_state(),
    }


def megatron_args(cfg: TrainConfig, position: dict[str, int], state: ParallelState) -> argparse.Namespace:
    """``args`` under Megatron-DeepSpeed's names (megatron/arguments.py), from the config and the position."""
    m, o, s = cfg.model, cfg.optim, cfg.schedule
    return argparse.Namespace(
        num_layers=m.num_layers, hidden_size=m.hidden_size, ffn_hidden_size=m.ffn_hidden_size,
        num_attention_heads=m.num_heads, kv_channels=m.head_dim, seq_length=m.seq_length,
        max_position_embeddings=m.seq_length, padded_vocab_size=m.padded_vocab_size(state.tp_size),
        make_vocab_size_divisible_by=m.make_vocab_size_divisible_by, pad_vocab_size_to=m.pad_vocab_size_to,
        position_embedding_type="alibi", embed_layernorm=True, layernorm_epsilon=m.layernorm_eps,
        init_method_std=m.init_std, hidden_dropout=m.hidden_dropout, attention_dropout=m.attention_dropout,
        tensor_model_parallel_size=state.tp_size, pipeline_model_parallel_size=state.pp_size,
        data_parallel_size=state.dp_size, world_size=state.tp_size * state.pp_size * state.dp_size,
        micro_batch_size=s.micro_batch_size, global_batch_size=s.global_batch_size,
        rampup_batch_size=[str(v) for v in s.rampup_batch_size] if s.rampup_batch_size else None,
        train_iters=s.train_iters, train_samples=s.train_samples, lr=o.lr, min_lr=o.min_lr,
        lr_decay_style=s.decay_style, lr_warmup_samples=s.warmup_samples, lr_decay_samples=s.decay_samples,
        weight_decay=o.weight_decay, clip_grad=o.clip_grad, adam_beta1=o.beta1, adam_beta2=o.beta2,
        adam_eps=o.eps, bf16=o.precision == "bf16", fp16=False, seed=cfg.seed,
        tokenizer_type="PretrainedFromHF", tokenizer_name_or_path=cfg.data.tokenizer,
        save=cfg.checkpoint.dir, load=cfg.checkpoint.dir,
        save_interval=None if cfg.checkpoint.save_interval == "auto" else cfg.checkpoint.save_interval,
        deepspeed=True, universal_checkpoint=cfg.checkpoint.load_universal, iteration=position["iteration"],
        consumed_train_samples=position["consumed_samples"], consumed_valid_samples=0,
        consumed_train_tokens=position["consumed_samples"] * m.seq_length, gigaflos_no_embeds=0,
    )


def read_client(tag_dir: str | Path) -> dict[str, Any] | None:
    """The client state of a tag's first ``mp_rank`` file (safe_load), or None when it has none."""
    path = Path(tag_dir) / MP_RANK_00
    return safe_load.load(path) if path.is_file() else None


def position_of(client: dict[str, Any], where: Path) -> dict[str, int]:
    """The trainer position of a loaded client state: bloomtrain's own, else Megatron-DeepSpeed's.

    Megatron-DeepSpeed keeps no count of skipped steps in its client state, so its samples all count as
    scheduled (exact for BLOOM's bf16 runs, which skip no step)."""
    if "bloomtrain" in client:
        return dict(client["bloomtrain"])
    args, iteration = client.get("args"), client.get("iteration")
    if args is None or iteration is None:
        raise BloomstackError(f"checkpoint {where} has neither bloomtrain's position nor Megatron-DeepSpeed's "
                              "'args' and 'iteration' in its mp_rank files: it was not written by a trainer "
                              "that can be resumed")
    consumed = int(getattr(args, "consumed_train_samples", 0))
    return {"iteration": int(iteration), "consumed_samples": consumed, "scheduled_samples": consumed,
            "skipped_iters": 0, "consecutive_skips": 0}


def layout_of_args(args: argparse.Namespace) -> dict[str, int]:
    """{"tp", "pp", "dp"} a Megatron-DeepSpeed run saved with."""
    tp, pp = args.tensor_model_parallel_size, args.pipeline_model_parallel_size
    dp = getattr(args, "data_parallel_size", None) or args.world_size // (tp * pp)
    return {"tp": tp, "pp": pp, "dp": dp}


def check_model(model: ModelConfig, tp_size: int, args: argparse.Namespace, where: Path) -> None:
    """Refuse, naming each differing key, a checkpoint whose weights have another shape than ``model``'s."""
    ours = {**{k: getattr(model, k) for k in SHAPE_ARGS}, "padded_vocab_size": model.padded_vocab_size(tp_size)}
    saved = {k: getattr(args, SHAPE_ARGS.get(k, k), None) for k in ours}
    wrong = [f"model.{k}={ours[k]} (checkpoint: {saved[k]})"
             for k in ours if saved[k] is not None and saved[k] != ours[k]]
    if wrong:
        raise BloomstackError(f"checkpoint {where} holds another model shape: {', '.join(wrong)}; set these "
                              "to the checkpoint's values (model.pad_vocab_size_to for the vocabulary) or start "
                              "from a fresh checkpoint.dir")
