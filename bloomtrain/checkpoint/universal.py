"""Resuming at another TP/PP/DP: the saved layout, the decision to convert, and ds_to_universal.

Each checkpoint records the layout it was saved with (``bloomtrain_layout.json``; for a checkpoint written by
Megatron-DeepSpeed, its ``args``). A run whose layout differs either refuses with a one-line fix
(``check_same_layout``) or, with ``checkpoint.load_universal``, loads a universal checkpoint of the tag: the
folder ``latest_universal`` names when it holds the tag's iteration (DeepSpeed's ds_to_universal output as it
is, or an earlier conversion of ours), else rank 0 converts the tag once into ``<tag>_universal/``. A
conversion runs in a staging folder and is moved into place before ``latest_universal`` names it, so a crash
mid-way leaves nothing that looks complete, and the next start converts again from scratch.
"""

from __future__ import annotations

import os
import shutil
from argparse import Namespace
from pathlib import Path

import torch.distributed as dist

from bloomdata import durable
from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import safe_load
from bloomtrain.checkpoint.megatron import layout_of_args, read_client
from bloomtrain.checkpoint.tags import LATEST_UNIVERSAL, commit_universal, read_latest
from bloomtrain.config import TrainConfig
from bloomtrain.parallel.state import ParallelState

LAYOUT_FILE = "bloomtrain_layout.json"  # {"tp", "pp", "dp"} the checkpoint was saved with
STAGING = ".universal-staging"  # where to_universal lets ds_to_universal write, before the move into place


def layout_of(state: ParallelState) -> dict[str, int]:
    return {"tp": state.tp_size, "pp": state.pp_size, "dp": state.dp_size}


def save_layout(ckpt_dir: str | Path, tag: str, state: ParallelState,
                write: durable.Writer = durable.write_with) -> None:
    data = durable.json_text(layout_of(state), indent=None).encode("utf-8")
    write(Path(ckpt_dir) / tag / LAYOUT_FILE, lambda f: f.write(data))


def saved_layout(ckpt_dir: str | Path, tag: str) -> dict[str, int] | None:
    """The layout ``tag`` was saved with: our layout file, else Megatron-DeepSpeed's ``args``; None if neither."""
    layout = durable.read_json(Path(ckpt_dir) / tag / LAYOUT_FILE)
    if layout is None:
        client = read_client(Path(ckpt_dir) / tag)
        if client is not None and client.get("args") is not None:
            layout = layout_of_args(client["args"])
    return layout


def needs_universal(cfg: TrainConfig, state: ParallelState) -> bool:
    """Resume through a universal checkpoint: asked for, and ``latest`` was saved in another layout (or there
    is no ``latest``, only a ``latest_universal``).

    After the first save in the new layout, restarts with the same config load that checkpoint directly
    (a 176B conversion takes most of an hour), so ``load_universal`` can stay on in the config. Decided
    before the engine is built, because DeepSpeed reads its load_universal flag from the config.
    """
    if not (cfg.checkpoint.load_universal and cfg.checkpoint.dir and cfg.checkpoint.load):
        return False
    tag = read_latest(cfg.checkpoint.dir)
    if tag is None:
        return read_latest(cfg.checkpoint.dir, LATEST_UNIVERSAL) is not None
    return saved_layout(cfg.checkpoint.dir, tag) != layout_of(state)


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


def ensure_universal(ckpt_dir: Path, tag: str | None) -> str:
    """Collective: the universal folder of ``tag`` (None: whatever ``latest_universal`` names); rank 0 converts
    ``tag`` unless ``latest_universal`` already names a conversion of it."""
    if dist.get_rank() == 0 and universal_of(ckpt_dir, tag) is None:
        if tag is None:
            raise BloomstackError(f"{ckpt_dir / LATEST_UNIVERSAL} names no universal checkpoint folder with a zero/ "
                                  "directory; rerun ds_to_universal or remove checkpoint.load_universal")
        to_universal(Path(ckpt_dir) / tag, Path(ckpt_dir) / f"{tag}_universal")
    dist.barrier()
    folder = universal_of(ckpt_dir, tag)
    assert folder is not None  # rank 0 found or wrote it before the barrier
    return folder


def universal_of(ckpt_dir: Path, tag: str | None) -> str | None:
    """The folder ``latest_universal`` names, if it is a universal checkpoint (``zero/`` and mp_rank files)
    of ``tag``'s iteration (of any when ``tag`` is None)."""
    name = read_latest(ckpt_dir, LATEST_UNIVERSAL)
    if name is None or not (Path(ckpt_dir) / name / "zero").is_dir():
        return None
    converted = _iteration(Path(ckpt_dir) / name)
    if converted is None or (tag is not None and converted != _iteration(Path(ckpt_dir) / tag)):
        return None
    return name


def _iteration(folder: Path) -> int | None:
    client = read_client(folder)
    if client is None:
        return None
    # Megatron-DeepSpeed's (and ours) and, for checkpoints of ours without it, DeepSpeed's own step counter
    return client.get("iteration", client.get("global_steps"))


def to_universal(tag_dir: str | Path, out_dir: str | Path, workers: int = 1) -> Path:
    """Run DeepSpeed's ds_to_universal on one checkpoint tag directory (our patterns are in its mp_rank files),
    then move the result to ``out_dir`` and point ``latest_universal`` (beside it) at it."""
    from deepspeed.checkpoint.ds_to_universal import main as ds_to_universal  # noqa: PLC0415

    tag_dir, out_dir = Path(tag_dir), Path(out_dir)
    if not tag_dir.is_dir():
        raise BloomstackError(f"checkpoint directory {tag_dir} does not exist")
    staging = out_dir.parent / STAGING
    shutil.rmtree(staging, ignore_errors=True)  # a crashed conversion's
    args = Namespace(input_folder=str(tag_dir), output_folder=str(staging / out_dir.name),
                     num_extract_workers=workers, num_merge_workers=workers, keep_temp_folder=False, strict=True,
                     inject_missing_state=False)
    safe_load.guarded(tag_dir, lambda: ds_to_universal(args))  # its torch.loads read with weights_only too
    _sync_tree(staging / out_dir.name)  # ds_to_universal writes with plain torch.save: on disk before the move
    shutil.rmtree(out_dir, ignore_errors=True)
    os.replace(staging / out_dir.name, out_dir)
    durable.fsync_dir(out_dir.parent)
    shutil.rmtree(staging)
    commit_universal(out_dir.parent, out_dir.name)
    return out_dir


def _sync_tree(root: Path) -> None:
    for folder, _dirs, files in os.walk(root):
        for name in files:
            with open(os.path.join(folder, name), "rb") as f:
                durable.sync_file(f)
        durable.fsync_dir(folder)
