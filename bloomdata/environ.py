"""``environ_restored``: put back, on exit, the environment variables a scope changes (its own writes, or a
library's: the Dask Nanny's thread settings) as they were, unset ones unset."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator


@contextlib.contextmanager
def environ_restored(keys: Iterable[str]) -> Iterator[None]:
    """Within the scope ``os.environ`` may change; on exit each of ``keys`` has its value from the start again."""
    saved = {key: os.environ.get(key) for key in keys}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
