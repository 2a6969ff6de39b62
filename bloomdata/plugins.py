"""Classes a config names as ``package.module:ClassName``: how users add a reader, a cleaning step or a training
callback without editing ours.

One syntax and one loader for all of them. ``TARGET`` is what a config validator accepts; ``load_class`` imports
the module where the config is used (on every rank, on every Dask worker) and checks the class against the
interface it must implement, failing in one line that names the config key and the fix.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping
from typing import TypeVar

from bloomdata.errors import BloomstackError

TARGET = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
"""``package.module:ClassName``."""

T = TypeVar("T")


def check_target(value: str) -> str:
    """``value`` if it has the form ``package.module:ClassName``; a ``ValueError`` (for pydantic) otherwise."""
    if not TARGET.fullmatch(value):
        raise ValueError(f"{value!r} is not package.module:ClassName")
    return value


def load_class(target: str, base: type[T], where: str, base_name: str = "") -> type[T]:
    """The class ``target`` names, a subclass of ``base``.

    ``where`` names the config key that set it (``callbacks[0]``, ``quality.steps[2]``) and ``base_name`` the
    interface as users import it (default: where ``base`` is defined), for the error."""
    check_target(target)
    module_name, _, name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise BloomstackError(f"{where} ({target}): cannot import it ({type(exc).__name__}: {exc}); check that the "
                              "module is on the PYTHONPATH of every process that runs it, and the class name") from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise BloomstackError(f"{where} ({target}): not a subclass of "
                              f"{base_name or base.__module__ + '.' + base.__qualname__}")
    return cls


def resolve(name: str, builtins: Mapping[str, type[T]], base: type[T], where: str, base_name: str = "") -> type[T]:
    """A built-in class by its short name (``builtins``: the one place a family lists its own), or a user's by
    ``package.module:ClassName``."""
    if ":" in name:
        return load_class(name, base, where, base_name)
    if name not in builtins:
        raise BloomstackError(f"{where}: unknown {name!r}; choose one of {', '.join(sorted(builtins))} or name your "
                              "own class as package.module:ClassName")
    return builtins[name]
