"""The callbacks a training config names (``callbacks: [...]``): a user adds one without editing the trainer.

Each ``CallbackSpec`` is ``package.module:ClassName`` with keyword ``args``; the class is imported on every
rank when the trainer is built and must subclass ``bloomtrain.callbacks.Callback``. They run after the
trainer's own callbacks but before the checkpoint callback (so a saved state is the state after the
iteration saved), in the config's order, and before those the caller passes in code (the exit record stays
last). An import or constructor failure is a one-line error naming ``callbacks[i]``, before the run
starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from bloomdata.errors import BloomstackError
from bloomtrain.callbacks.base import Callback
from bloomtrain.config import CallbackSpec


def build_callback(spec: CallbackSpec, index: int) -> Callback:
    """The callback ``spec`` names, constructed with its ``args``."""
    where = f"callbacks[{index}] ({spec.target})"
    module_name, _, name = spec.target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise BloomstackError(f"{where}: cannot import it ({type(exc).__name__}: {exc}); check the module is "
                              "on every rank's PYTHONPATH and the class name") from None
    if not (isinstance(cls, type) and issubclass(cls, Callback)):
        raise BloomstackError(f"{where}: not a subclass of bloomtrain.callbacks.Callback")
    try:
        return cls(**spec.args)
    except TypeError as exc:
        raise BloomstackError(f"{where}: its constructor rejected args {spec.args} ({exc}); fix callbacks[{index}]"
                              ".args") from None


def configured_callbacks(specs: Sequence[CallbackSpec]) -> list[Callback]:
    return [build_callback(spec, i) for i, spec in enumerate(specs)]
