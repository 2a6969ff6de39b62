"""The files a training config reads, and one check that they are all there before anything is launched.

``bloomtrain slurm`` runs it when it writes the job (relative paths taken from the job's ``--workdir``), the
trainer when it starts: a missing blend, dataset or tokenizer is then a config or input error (exit 2, one
line, never retried: bloomtrain.recovery) instead of a crash deep inside the data pipeline on every rank.
"""

from __future__ import annotations

from pathlib import Path

from bloomdata.blend.spec import load_blend_spec
from bloomdata.errors import BloomstackError
from bloomtrain.config import TrainConfig

DATASET_SUFFIXES = (".bin", ".idx")  # a Megatron dataset prefix names both files


def _resolve(path: str, base: Path) -> Path:
    p = Path(path).expanduser()
    return p if p.is_absolute() else base / p


def _check_prefix(key: str, prefix: str, base: Path, via: str = "") -> None:
    missing = [s for s in DATASET_SUFFIXES if not _resolve(prefix + s, base).is_file()]
    if missing:
        raise BloomstackError(f"{key}{via}: dataset {_resolve(prefix, base)}{'/'.join(missing)} not found; build it "
                              "with `bloomdata build` or fix the path")


def _check_dataset_or_blend(key: str, path: str, base: Path) -> None:
    """``path``: a blend YAML (every dataset it names must exist) or a Megatron dataset prefix."""
    if not path.endswith((".yaml", ".yml")):
        _check_prefix(key, path, base)
        return
    file = _resolve(path, base)
    if not file.is_file():
        raise BloomstackError(f"{key}: blend file {file} not found; write it with `bloomdata blend` or fix the path")
    spec = load_blend_spec(str(file))
    for dataset in spec.datasets:
        _check_prefix(key, dataset.prefix, base, via=f" ({file}, dataset {dataset.name})")


def check_inputs(cfg: TrainConfig, base: str | Path = ".") -> None:
    """Raise ``BloomstackError`` naming the config key and the file when an input of ``cfg`` is missing;
    relative paths are taken from ``base`` (the directory the trainer runs in)."""
    root = Path(base)
    data = cfg.data
    if data.kind == "blend" and data.blend:
        _check_dataset_or_blend("data.blend", data.blend, root)
    if data.valid_blend:
        _check_dataset_or_blend("data.valid_blend", data.valid_blend, root)
    for name, valid in data.valid_sets.items():
        _check_dataset_or_blend(f"data.valid_sets.{name}", valid.path, root)
    if data.tokenizer:
        tok = _resolve(data.tokenizer, root)
        if not (tok.is_file() or (tok / "tokenizer.json").is_file()):
            raise BloomstackError(f"data.tokenizer: {tok} is neither a tokenizer.json nor a directory holding one; "
                                  "fix the path")
