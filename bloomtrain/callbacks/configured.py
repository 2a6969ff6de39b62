"""The callbacks a training config names (``callbacks: [...]``): a user adds one without editing the trainer.

Each ``CallbackSpec`` is ``package.module:ClassName`` with keyword ``args``; the class is imported on every
rank when the trainer is built and must subclass ``bloomtrain.callbacks.Callback``. They run after the
trainer's own callbacks but before the checkpoint callback (so a saved state is the state after the
iteration saved), in the config's order, and before those the caller passes in code (the exit record stays
last). An import or constructor failure is a one-line error naming ``callbacks[i]``, before the run
starts.
"""

from __future__ import annotations

from collections.abc import Sequence

from bloomdata.errors import BloomstackError
from bloomdata.plugins import load_class
from bloomtrain.callbacks.base import Callback
from bloomtrain.config import CallbackSpec


def build_callback(spec: CallbackSpec, index: int) -> Callback:
    """The callback ``spec`` names, constructed with its ``args``."""
    where = f"callbacks[{index}] ({spec.target})"
    cls = load_class(spec.target, Callback, f"callbacks[{index}]", "bloomtrain.callbacks.Callback")
    try:
        return cls(**spec.args)
    except TypeError as exc:
        raise BloomstackError(f"{where}: its constructor rejected args {spec.args} ({exc}); fix callbacks[{index}]"
                              ".args") from None


def configured_callbacks(specs: Sequence[CallbackSpec]) -> list[Callback]:
    return [build_callback(spec, i) for i, spec in enumerate(specs)]
