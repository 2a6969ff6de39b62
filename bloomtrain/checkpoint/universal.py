"""Resuming at another TP/PP/DP: the saved layout, the decision to convert, and ds_to_universal.

Each checkpoint records the layout it was saved with (``bloomtrain_layout.json``). A run whose layout
differs either refuses with a one-line fix (``check_same_layout``) or, with ``checkpoint.load_universal``,
converts the tag once with DeepSpeed's ds_to_universal into ``<tag>_universal/`` and loads that. The
conversion is complete when its marker (bloomdata.durable) records the source tag; a crash mid-way leaves
no marker, so the next start converts again from scratch.
"""

from __future__ import annotations

import os
import shutil
from argparse import Namespace
from pathlib import Path

import torch.distributed as dist

from bloomdata import durable
from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint.tags import read_latest
from bloomtrain.config import TrainConfig
from bloomtrain.parallel.state import ParallelState

LAYOUT_FILE = "bloomtrain_layout.json"  # {"tp", "pp", "dp"} the checkpoint was saved with
UNIVERSAL_MARKER = "bloomtrain_universal.json"  # written last in <tag>_universal/


def layout_of(state: ParallelState) -> dict[str, int]:
    return {"tp": state.tp_size, "pp": state.pp_size, "dp": state.dp_size}


def save_layout(ckpt_dir: str | Path, tag: str, state: ParallelState) -> None:
    durable.write_json(Path(ckpt_dir) / tag / LAYOUT_FILE, layout_of(state), indent=None)


def saved_layout(ckpt_dir: str | Path, tag: str) -> dict[str, int] | None:
    return durable.read_json(Path(ckpt_dir) / tag / LAYOUT_FILE)


def needs_universal(cfg: TrainConfig, state: ParallelState) -> bool:
    """Resume through a universal checkpoint: asked for, and ``latest`` was saved in another layout.

    After the first save in the new layout, restarts with the same config load that checkpoint directly
    (a 176B conversion takes most of an hour), so ``load_universal`` can stay on in the config. Decided
    before the engine is built, because DeepSpeed reads its load_universal flag from the config.
    """
    if not (cfg.checkpoint.load_universal and cfg.checkpoint.dir and cfg.checkpoint.load):
        return False
    tag = read_latest(cfg.checkpoint.dir)
    return tag is not None and saved_layout(cfg.checkpoint.dir, tag) != layout_of(state)


def check_same_layout(cfg: TrainConfig, ckpt_dir: Path, tag: str, state: ParallelState) -> None:
    """Refuse, with the fix, to load a checkpoint saved in a layout this run cannot read directly."""
    saved, now = saved_layout(ckpt_dir, tag), layout_of(state)
    if saved is None or saved == now:
        return
    # fp32 mode keeps whole optimizer states on every DP rank, so only TP and PP must match there
    keys = ("tp", "pp") if cfg.optim.precision == "fp32" else ("tp", "pp", "dp")
    if any(saved[k] != now[k] for k in keys):
        raise BloomstackError(
            f"checkpoint {ckpt_dir / tag} was saved at tp={saved['tp']} pp={saved['pp']} dp={saved['dp']}, "
            f"this run is tp={now['tp']} pp={now['pp']} dp={now['dp']}; set checkpoint.load_universal=true "
            "to convert it (bf16), or launch the saved layout"
        )


def ensure_universal(ckpt_dir: Path, tag: str) -> str:
    """Collective: rank 0 converts ``tag`` unless a complete conversion exists; returns the universal tag."""
    out = f"{tag}_universal"
    if dist.get_rank() == 0 and durable.read_marker(Path(ckpt_dir) / out / UNIVERSAL_MARKER, _key(tag)) is None:
        to_universal(Path(ckpt_dir) / tag, Path(ckpt_dir) / out)
    dist.barrier()
    return out


def _key(tag: str) -> str:
    return durable.content_key({"ds_to_universal": tag})


def to_universal(tag_dir: str | Path, out_dir: str | Path, workers: int = 1) -> Path:
    """Run DeepSpeed's ds_to_universal on one checkpoint tag directory (our patterns are in its mp_rank files)."""
    from deepspeed.checkpoint.ds_to_universal import main as ds_to_universal  # noqa: PLC0415

    tag_dir, out_dir = Path(tag_dir), Path(out_dir)
    if not tag_dir.is_dir():
        raise BloomstackError(f"checkpoint directory {tag_dir} does not exist")
    shutil.rmtree(out_dir, ignore_errors=True)  # a conversion without its marker is incomplete
    ds_to_universal(Namespace(input_folder=str(tag_dir), output_folder=str(out_dir), num_extract_workers=workers,
                              num_merge_workers=workers, keep_temp_folder=False, strict=True,
                              inject_missing_state=False))
    _sync_tree(out_dir)  # ds_to_universal writes with plain torch.save: on disk before the marker vouches for it
    durable.write_marker(out_dir / UNIVERSAL_MARKER, _key(tag_dir.name))
    return out_dir


def _sync_tree(root: Path) -> None:
    for folder, _dirs, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                durable.sync_file(f)
        durable.fsync_dir(folder)
