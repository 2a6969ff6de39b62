"""Console output of bloomtrain: the ``bloomtrain`` logger, printed by global rank 0 only.

Modules log to ``logging.getLogger(__name__)``, children of ``bloomtrain``. ``setup_console()`` (called by
the composition root) gives ``bloomtrain`` one handler that writes the bare message to stdout, with a
filter that drops records on every rank but global rank 0: all ranks reach the same log calls with the
same values, and one copy is enough. The logger does not propagate, so an application's root handler
does not print our lines twice; DeepSpeed's and other loggers are left alone.
"""

from __future__ import annotations

import logging
import sys

import torch.distributed as dist

LOGGER = "bloomtrain"


class RankZeroFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not dist.is_initialized() or dist.get_rank() == 0


class _StdoutHandler(logging.StreamHandler):
    """A StreamHandler on the ``sys.stdout`` of the moment (pytest and notebooks replace it)."""

    @property
    def stream(self):
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns it; the property always wins
        pass


def setup_console() -> None:
    """Idempotent: attach the rank-0 stdout handler to the ``bloomtrain`` logger once per process."""
    logger = logging.getLogger(LOGGER)
    if any(isinstance(h, _StdoutHandler) for h in logger.handlers):
        return
    handler = _StdoutHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.addFilter(RankZeroFilter())
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
