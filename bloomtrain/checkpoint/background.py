"""The background half of an asynchronous save (``checkpoint.async_save``): its files, and the thread that writes them.

An asynchronous save (bloomtrain.checkpoint.checkpointer) takes the checkpoint in the training thread, into host
memory: DeepSpeed's states through ``HostCopier`` (bloomtrain.checkpoint.host_copy), the RNG and metadata files as
the values they hold then. ``DeferredFiles`` keeps each file as a fill to run later (a ``durable.Writer``, so the
same code that writes a synchronous save hands its files over); ``BackgroundSave`` then writes them, each through
the save's ledger (atomic, fsynced, digested), and commits the tag, in a thread of its own while training goes
on. The thread is a daemon: a process that ends without waiting for it (an error elsewhere, a kill) leaves the
tag unpublished, which the next start sweeps; every orderly end waits for it (``Checkpointer.wait``). It runs at
a lower CPU priority (nice +10: ``BACKGROUND_NICE``), so that where cores are short training's threads come first;
the hashing and the writes release the GIL (xxhash, torch's zip writer, the file's write).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from bloomdata import durable


class DeferredFiles:
    """A save's files, taken now and written later. ``write`` has ``durable.write_with``'s shape: each ``fill`` must
    close over values taken when it is handed over (copies), never over state that training goes on changing."""

    def __init__(self) -> None:
        self.files: list[tuple[Path, Callable[[IO[bytes]], object]]] = []

    def write(self, path: durable.PathLike, fill: Callable[[IO[bytes]], object]) -> None:
        self.files.append((Path(path), fill))

    def write_all(self, write: durable.Writer, after_file: Callable[[Path], None]) -> None:
        """Write every file through ``write`` (a save's ledger), in the order they were taken; ``after_file(path)``
        after each (the fault hook of tests); each fill is dropped once written (its host copy with it)."""
        while self.files:
            path, fill = self.files.pop(0)
            write(path, fill)
            after_file(path)


class BackgroundSave:
    """``work()`` (write one tag's files and commit it) in a daemon thread; ``wait`` joins it and raises its error."""

    def __init__(self, tag: str, work: Callable[[], None]) -> None:
        self.tag = tag
        self.error: BaseException | None = None
        self.write_s: float | None = None
        """Seconds the background work took (None while it runs)."""
        self.progress_at = time.monotonic()
        """When the work last progressed (``progressed``): started, wrote a file, ended."""
        self._work = work
        self._thread = threading.Thread(target=self._run, name=f"bloomtrain-save-{tag}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        start = time.perf_counter()
        _lower_priority()
        try:
            self._work()
        except BaseException as exc:  # noqa: BLE001 - handed to the training thread by wait()
            self.error = exc
        finally:
            self.write_s = time.perf_counter() - start
            self.progressed()

    def progressed(self) -> None:
        self.progress_at = time.monotonic()

    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self) -> float:
        """Block until the tag is committed (or failed); re-raise the background's error here; returns write_s."""
        self._thread.join()
        if self.error is not None:
            raise self.error
        assert self.write_s is not None
        return self.write_s


BACKGROUND_NICE = 10
"""The writer thread's nice value: where cores are short (a CPU-only box), training's threads come first."""


def _lower_priority() -> None:
    """Give the calling thread (a Linux task of its own) a lower CPU priority; a no-op where that is not possible."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), BACKGROUND_NICE)
    except (AttributeError, OSError):  # not Linux, or not permitted
        pass
