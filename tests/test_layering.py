"""The import direction is part of the design: flows -> bloomtrain -> bloomdata, never back.

bloomdata never imports torch, deepspeed or prefect (its workers stay light); only bloomdata/jobs/executor.py
imports dask; only flows/ imports prefect; deepspeed stays out of the model code. Checked on the source
with ast, so a violation fails here before it reaches a user.
"""

from __future__ import annotations

import ast
import subprocess
import sys
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


@pytest.mark.integration
def test_configs_and_command_modules_import_no_torch():
    """Loading a config, writing an sbatch script or printing a command's --help imports no torch, DeepSpeed or
    transformers: ``bloomtrain slurm`` took 5.0 s and ``bloomtrain train --help`` 6.8 s when the config pulled the
    model package in, 0.7 s without. Checked in a fresh interpreter, where the modules are really imported."""
    from bloomtrain.cli import COMMANDS

    modules = ["bloomtrain.config", "bloomtrain.evaluation.config", "bloomtrain.mixture_search.config",
               "flows.config", *(module for module, _ in COMMANDS.values())]
    code = (f"import importlib, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted({'torch', 'deepspeed', 'transformers'} & set(sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]", f"imported by one of {modules}: {proc.stdout}"


# --- no import circle, and each package's layers -----------------------------------------------------------
# The graph of files is drawn from every import statement (module level, inside functions, under TYPE_CHECKING):
# a delayed import hides a circle from Python, not from a reader.

PACKAGES = ("bloomdata", "bloomtrain", "flows")
FILES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _module_file(module: str) -> Path | None:
    base = ROOT / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_files(path: Path, source: str | None = None) -> set[Path]:
    """The project's files that ``path`` (its text: ``source``) imports: ``from a.b import c`` is a/b/c.py when
    that is a module, else a/b.py (or a/b/__init__.py)."""
    package = list(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[Path] = set()
    text = path.read_text() if source is None else source
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(f for a in node.names if (f := _module_file(a.name)) is not None)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            if module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                target = _module_file(f"{module}.{alias.name}") or _module_file(module)
                if target is not None:
                    found.add(target)
    found.discard(path)
    return found


GRAPH = {path: _imported_files(path) for path in FILES}


def import_cycles(graph: dict[Path, set[Path]]) -> list[list[Path]]:
    """The strongly connected sets of more than one file (Tarjan), each sorted."""
    index: dict[Path, int] = {}
    low: dict[Path, int] = {}
    stack: list[Path] = []
    on_stack: set[Path] = set()
    cycles: list[list[Path]] = []

    def visit(v: Path) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_circle_anywhere():
    cycles = import_cycles(GRAPH)
    assert not cycles, "files that import each other in a circle: " + "; ".join(
        " <-> ".join(str(p.relative_to(ROOT)) for p in c) for c in cycles)


def test_the_cycle_finder_finds_a_circle_through_a_delayed_import(tmp_path):
    """The finder itself, on a made-up package: a -> b at module level, b -> a inside a function."""
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    assert import_cycles({a: {b}, b: {a, c}, c: set()}) == [[a, b]]
    assert import_cycles({a: {b}, b: {c}, c: set()}) == []
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from bloomdata.clean.steps import Filter\n" \
             "def f():\n    from bloomdata.clean import run  # noqa: PLC0415\n"
    made_up = ROOT / "bloomdata" / "clean" / "made_up.py"  # never written: its text is given
    clean = ROOT / "bloomdata" / "clean"
    assert _imported_files(made_up, source) == {clean / "steps.py", clean / "run.py"}


def _layers(init: Path) -> list[list[str]] | None:
    """A package's ``LAYERS`` (in its ``__init__.py``): module names per layer, lowest first; None without one."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "LAYERS" for t in node.targets):
            return [layer.split() for layer in ast.literal_eval(node.value)]
    return None


LAYERED = [p.parent for p in FILES if p.name == "__init__.py" and _layers(p) is not None]


def test_the_named_packages_write_down_their_layers():
    named = {"bloomdata/clean", "bloomdata/jobs", "bloomtrain", "bloomtrain/callbacks"}
    assert named <= {p.relative_to(ROOT).as_posix() for p in LAYERED}


@pytest.mark.parametrize("package", LAYERED, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_files_import_only_lower_layers_of_their_package(package):
    layers = _layers(package / "__init__.py")
    assert layers is not None
    where = package.relative_to(ROOT).as_posix()
    layer_of = {name: i for i, layer in enumerate(layers) for name in layer}
    files = {p.stem: p for p in package.glob("*.py")}
    missing, unknown = sorted(set(files) - set(layer_of)), sorted(set(layer_of) - set(files))
    assert not missing, f"{where}: {', '.join(missing)} is in no layer; add it to LAYERS in {where}/__init__.py"
    assert not unknown, f"{where}/__init__.py: LAYERS names {', '.join(unknown)}, which is not a file there"
    wrong = [f"{name} (layer {layer_of[name]}) imports {t.stem} (layer {layer_of[t.stem]})"
             for name, path in sorted(files.items()) for t in sorted(GRAPH[path])
             if t.parent == package and layer_of[t.stem] >= layer_of[name]]
    assert not wrong, f"{where}: a file imports its own layer or a higher one: " + "; ".join(wrong)
