"""The import direction is part of the design: flows -> bloomtrain -> bloomdata, never back.

bloomdata never imports torch, deepspeed or prefect (its workers stay light); only bloomdata/jobs/executor.py
imports dask; only flows/ imports prefect; deepspeed stays out of the model code. Checked on the source
with ast, so a violation fails here before it reaches a user.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", _files("bloomdata"), ids=lambda p: str(p.relative_to(ROOT)))
def test_bloomdata_stays_light(path):
    found = _imports(path)
    assert not found & {"torch", "deepspeed", "prefect", "prefect_dask", "bloomtrain", "flows"}, found
    if path.relative_to(ROOT).as_posix() != "bloomdata/jobs/executor.py":
        assert not found & {"dask", "distributed"}, f"{path.name}: only bloomdata/jobs/executor.py may import dask"


@pytest.mark.parametrize("path", _files("bloomtrain"), ids=lambda p: str(p.relative_to(ROOT)))
def test_bloomtrain_never_imports_flows_or_prefect(path):
    found = _imports(path)
    assert not found & {"flows", "prefect", "prefect_dask"}, found
    if "model" in path.relative_to(ROOT).parts:
        assert "deepspeed" not in found, f"{path}: the model code holds no DeepSpeed import"
