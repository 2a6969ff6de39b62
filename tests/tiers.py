"""The two test tiers: ``make test-fast`` runs ``-m "not integration and not gpu"``, ``make test`` runs all.

A test is ``integration`` when it starts another process (a subprocess, a CLI, torchrun, gloo ranks, Dask worker
processes it launches itself, the Prefect API server), needs Slurm, a browser, root (a tmpfs mount) or the
session's ``make demo``. The marker is written by hand (``pytestmark`` for a module, a decorator for a test);
``unmarked_launchers`` finds the tests that launch without it, and tests/conftest.py stops the collection on
any, so a new launching test cannot slip into the fast tier.

Found by reading code, not by running it: the test function and the fixtures it requests, followed into every
function and class of the ``tests`` package they name (helpers, harnesses, conftests), for names that resolve to
a process launcher (``subprocess``, ``multiprocessing``, ``pty``, ``os.fork``/``os.system``/...). Code outside
``tests`` is not followed: a library that forks inside a call the test makes is not seen.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import sys
import types
from collections.abc import Iterable, Iterator
from typing import Any

import pytest

MARKER = "integration"
LAUNCHER_MODULES = ("subprocess", "multiprocessing", "pty", "concurrent.futures.process")
OS_LAUNCHERS = frozenset({"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp", "spawnv",
                          "spawnve", "spawnl", "execv", "execve", "execvp", "execvpe", "execl", "execlp"})
# Fixtures that start a process inside a library call (not visible in the tests' code), and why
LAUNCHING_FIXTURES = {
    "prefect_harness": "the Prefect API server (prefect_test_harness starts it as a subprocess)",
    "small_disk": "a tmpfs mount (root)",
}


def _is_launcher_module(mod: types.ModuleType) -> bool:
    return any(mod.__name__ == m or mod.__name__.startswith(m + ".") for m in LAUNCHER_MODULES)


def _ours(obj: Any) -> bool:
    return (getattr(obj, "__module__", None) or "").split(".")[0] == "tests"


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _codes(const)


def _functions(obj: Any) -> Iterator[types.FunctionType]:
    """The functions to read for ``obj``: itself (unwrapped), or a class's methods and properties."""
    if isinstance(obj, type):
        for value in vars(obj).values():
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                yield from (f for f in (value.fget, value.fset) if isinstance(f, types.FunctionType))
            elif isinstance(value, types.FunctionType):
                yield value
        return
    obj = inspect.unwrap(obj) if callable(obj) else obj
    obj = getattr(obj, "__func__", obj)
    if isinstance(obj, types.FunctionType):
        yield obj


def _resolve(fn: types.FunctionType, names: set[str]) -> Iterator[tuple[str, Any]]:
    """(name, object) for each of ``names`` that is a global of ``fn``, a module it imports in its body
    (``import subprocess``, ``from tests.harness.demo_run import run_demo``: the module's dotted name is among the
    code's names), or an attribute of such a module of the ``tests`` package (``gloo_harness.run_distributed``)."""
    scope = fn.__globals__
    for name in names:
        value = scope.get(name, getattr(builtins, name, None))
        if value is None and (name.split(".")[0] == "tests" or name in LAUNCHER_MODULES):
            value = sys.modules.get(name) or importlib.import_module(name)  # imported in the function's body
        if value is None:
            continue
        yield name, value
        if isinstance(value, types.ModuleType) and value.__name__.split(".")[0] == "tests":
            yield from ((f"{name}.{n}", getattr(value, n)) for n in names if hasattr(value, n))


def launch_reason(obj: Any, seen: set[int] | None = None) -> str | None:
    """Why calling ``obj`` (a function or class) starts a process, as ``helper -> ... -> launcher``; None when the
    code of ``obj`` and of the ``tests`` functions it names never names a launcher."""
    seen = set() if seen is None else seen
    for fn in _functions(obj):
        if id(fn.__code__) in seen:
            continue
        seen.add(id(fn.__code__))
        names = {n for code in _codes(fn.__code__) for n in code.co_names}
        for name, value in _resolve(fn, names):
            if isinstance(value, types.ModuleType):
                if _is_launcher_module(value):
                    return f"{fn.__qualname__} -> {value.__name__}"
                if value.__name__ == "os" and names & OS_LAUNCHERS:
                    return f"{fn.__qualname__} -> os.{sorted(names & OS_LAUNCHERS)[0]}"
                continue
            module = getattr(value, "__module__", None) or ""
            if any(module == m or module.startswith(m + ".") for m in LAUNCHER_MODULES):
                return f"{fn.__qualname__} -> {module}.{getattr(value, '__name__', name)}"
            if _ours(value) and (isinstance(value, type) or callable(value)):
                inner = launch_reason(value, seen)
                if inner:
                    return f"{fn.__qualname__} -> {inner}"
    return None


def _fixture_funcs(item: pytest.Item) -> Iterable[tuple[str, Any]]:
    info = getattr(item, "_fixtureinfo", None)
    for name, defs in (info.name2fixturedefs.items() if info else ()):
        for fixturedef in defs:
            yield name, fixturedef.func


def item_launches(item: pytest.Item) -> str | None:
    """Why the test ``item`` is an integration test (None when nothing in its code or fixtures launches)."""
    for name in getattr(item, "fixturenames", ()):
        if name in LAUNCHING_FIXTURES:
            return f"fixture {name}: {LAUNCHING_FIXTURES[name]}"
    reason = launch_reason(getattr(item, "obj", None))
    if reason:
        return reason
    for name, func in _fixture_funcs(item):
        if _ours(func) and (reason := launch_reason(func)):
            return f"fixture {name}: {reason}"
    return None


def unmarked_launchers(items: Iterable[pytest.Item]) -> list[str]:
    """One line per test that launches a process without the ``integration`` marker: where, why, the fix."""
    lines = []
    for item in items:
        if item.get_closest_marker(MARKER) is None and (reason := item_launches(item)):
            path, line, _ = item.location
            lines.append(f"{path}:{(line or 0) + 1}: {item.name} starts a process ({reason}) but is not marked: "
                         f"add @pytest.mark.{MARKER} (or the module's pytestmark)")
    return lines
