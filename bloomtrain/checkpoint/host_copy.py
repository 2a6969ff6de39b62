"""Host copies of checkpoint state: what an asynchronous save writes while training goes on.

``HostCopier.copy(obj)`` returns ``obj`` with every tensor storage copied once into host memory (pinned where the
tensor is on CUDA), and every container and value copied too, so that ``torch.save`` of the copy writes the bytes
``torch.save`` of ``obj`` would have written when the copy was taken, whatever training changes afterwards (the
parameters, the optimizer's moments and param groups, DeepSpeed's config, a callback's lists). Two rules make the
bytes the same, since pickle writes an object met twice as a reference to the first:

- containers (dict, list, tuple) are copied by hand and everything else by ``copy.deepcopy``, sharing one memo:
  an object met twice is one copy met twice, and strings, numbers and other immutable values stay the very same
  objects (a pickle round trip would not do: it interns the keys of every object's ``__dict__``, so an
  ``argparse.Namespace``'s ``lr`` key stops being the ``lr`` key of the optimizer's param groups);
- each tensor goes through pickle's own reduction, the one ``torch.save`` uses, with its storage swapped for the
  host copy: the same type (``nn.Parameter``), ``requires_grad``, attributes and view (offset, size, stride) into
  a storage that views of one storage still share.

A copied storage keeps the location its file records (``cuda:0``, not the host copy's ``cpu``): ``_origin_tag``,
registered with ``torch.serialization`` ahead of its own taggers, names the device of the storage it was copied
from, so a load puts every tensor back where the synchronous save's file would.

Host buffers are kept for the next save (``release`` hands them back once the copy is written): the state has the
same storages of the same sizes at every save, so after the first one a copy allocates nothing (a fresh 1 GB
buffer costs ~0.3 s of page faults on the host, pinned memory more) and costs one memcpy (or one device-to-host
copy) of the state. The price: host memory of one checkpoint's size per rank, held for the whole run.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections import OrderedDict, defaultdict
from typing import Any

import torch
import torch.serialization

_ORIGINS: dict[int, str] = {}
"""``_cdata`` of a host storage holding a copy -> the location (``cuda:0``) of the storage it was copied from."""


def _origin_tag(storage: Any) -> str | None:
    untyped = storage._untyped_storage if isinstance(storage, torch.storage.TypedStorage) else storage
    return _ORIGINS.get(untyped._cdata)


def _no_deserializer(storage: Any, location: str) -> None:  # noqa: ARG001 - register_package's signature
    return None  # loads are torch's own taggers' business


torch.serialization.register_package(0, _origin_tag, _no_deserializer)


class HostCopier:
    """Copies checkpoint state to host memory (``copy``) into buffers reused from one save to the next."""

    def __init__(self) -> None:
        self._free: dict[int, list[torch.UntypedStorage]] = defaultdict(list)
        self._used: list[torch.UntypedStorage] = []

    def copy(self, obj: Any) -> Any:
        """``obj`` with its tensors' storages in host memory (see the module docstring); waits for the device's
        copies, so ``obj`` may change as soon as it returns."""
        copies: dict[int, torch.UntypedStorage] = {}
        copied = self._copy(obj, {}, copies)
        if any(s.is_pinned() for s in copies.values()):
            torch.cuda.synchronize()  # the non-blocking device-to-host copies are done
        return copied

    def _copy(self, obj: Any, memo: dict[int, Any], copies: dict[int, torch.UntypedStorage]) -> Any:
        """``obj`` copied, each object once (``memo``: id -> copy, ``copy.deepcopy``'s), each storage once."""
        found = memo.get(id(obj), memo)
        if found is not memo:
            return found
        if isinstance(obj, torch.Tensor):
            buf = io.BytesIO()
            _Pickler(buf, self, copies).dump(obj)
            buf.seek(0)
            new = _Unpickler(buf, copies).load()
        elif type(obj) in (dict, OrderedDict):
            new = memo[id(obj)] = type(obj)()
            for key, value in obj.items():
                new[key] = self._copy(value, memo, copies)
        elif type(obj) is list:
            new = memo[id(obj)] = []
            new.extend(self._copy(value, memo, copies) for value in obj)
        elif type(obj) is tuple:
            new = tuple(self._copy(value, memo, copies) for value in obj)
        else:
            return copy.deepcopy(obj, memo)
        memo[id(obj)] = new
        return new

    def _host(self, storage: torch.UntypedStorage) -> torch.UntypedStorage:
        """A host copy of ``storage`` in a reused buffer of its size (pinned when ``storage`` is on CUDA)."""
        nbytes = storage.nbytes()
        on_cuda = storage.device.type == "cuda"
        free = self._free[nbytes]
        host = free.pop() if free else torch.empty(nbytes, dtype=torch.uint8, pin_memory=on_cuda).untyped_storage()
        self._used.append(host)
        if nbytes:
            host.copy_(storage, non_blocking=on_cuda)
        if storage.device.type != "cpu":
            _ORIGINS[host._cdata] = torch.serialization.location_tag(storage)
        else:
            _ORIGINS.pop(host._cdata, None)
        return host

    def release(self) -> None:
        """The copies are written: their buffers serve the next ``copy`` (do not use the copies any more)."""
        for host in self._used:
            self._free[host.nbytes()].append(host)
        self._used = []

    @property
    def held_bytes(self) -> int:
        """Host bytes this copier holds (buffers in use and free)."""
        return sum(s.nbytes() for s in self._used) + sum(s.nbytes() for ss in self._free.values() for s in ss)


class _Pickler(pickle.Pickler):
    """Pickles ``obj`` with each storage replaced by a key into ``copies`` (its host copy, made once)."""

    def __init__(self, buf: io.BytesIO, copier: HostCopier, copies: dict[int, torch.UntypedStorage]) -> None:
        super().__init__(buf, protocol=pickle.HIGHEST_PROTOCOL)
        self.copier, self.copies = copier, copies

    def persistent_id(self, obj: Any) -> tuple[int, torch.dtype | None] | None:
        if isinstance(obj, torch.storage.TypedStorage):
            untyped, dtype = obj._untyped_storage, obj.dtype
        elif isinstance(obj, torch.UntypedStorage):
            untyped, dtype = obj, None
        else:
            return None
        key = untyped._cdata  # what torch.save keys storages by: views of one storage share it
        if key not in self.copies:
            self.copies[key] = self.copier._host(untyped)
        return key, dtype


class _Unpickler(pickle.Unpickler):
    def __init__(self, buf: io.BytesIO, copies: dict[int, torch.UntypedStorage]) -> None:
        super().__init__(buf)
        self.copies = copies

    def persistent_load(self, pid: tuple[int, torch.dtype | None]) -> Any:
        key, dtype = pid
        host = self.copies[key]
        if dtype is None:
            return host
        return torch.storage.TypedStorage(wrap_storage=host, dtype=dtype, _internal=True)
