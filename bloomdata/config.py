"""YAML config files -> pydantic configs, with every failure as a one-line ``BloomstackError``.

Shared by the CLIs (`train-tokenizer`, `fertility`, `build`) and the blend YAML reader, so that a bad file
reads the same everywhere: the file, the field path, what is wrong and the value found.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from bloomdata.errors import BloomstackError

M = TypeVar("M", bound=BaseModel)


def load_yaml(path: str) -> dict:
    """The top-level mapping of a YAML file."""
    import yaml

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise BloomstackError(f"cannot read config {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise BloomstackError(f"{path}: invalid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise BloomstackError(f"{path}: expected a mapping of config fields at the top level")
    return data


def validate(model: type[M], data: dict, origin: str) -> M:
    """Pydantic validation with the first error turned into a one-line BloomstackError naming ``origin``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise BloomstackError(f"{origin}: {where}: {err['msg']} (got {err.get('input')!r:.80})") from None
