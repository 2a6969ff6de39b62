"""``HostCopier``: the host copy an asynchronous save writes: torch.save of it gives the bytes torch.save of the live
state gave when it was taken, whatever changes afterwards, and its buffers serve the next save."""

from __future__ import annotations

import argparse
import io
import zipfile

import torch

from bloomtrain.checkpoint import host_copy
from bloomtrain.checkpoint.host_copy import HostCopier


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _state() -> dict:
    flat = torch.arange(12, dtype=torch.float32)
    weight = torch.nn.Parameter(torch.randn(3, 4))
    master = flat.clone().requires_grad_()
    return {
        "module": {"weight": weight, "views": [flat[:6].view(2, 3), flat[6:]]},  # two views of one storage
        "optimizer": {"state": {0: {"exp_avg": torch.zeros(3, 4), "step": torch.tensor(5.0)}},
                      "param_groups": [{"lr": 1e-3, "params": [0]}], "master": master},
        "args": argparse.Namespace(lr=1e-3, save="/ckpt"),  # its `lr` key is the param group's `lr` string
        "bf16": torch.ones(4, dtype=torch.bfloat16), "shared": ("same",) * 2, "none": None,
    }


def test_the_copy_saves_the_same_bytes_and_keeps_them_when_the_state_changes():
    state = _state()
    before = _saved(state)
    copier = HostCopier()
    copy = copier.copy(state)
    assert _saved(copy) == before
    assert isinstance(copy["module"]["weight"], torch.nn.Parameter)
    assert copy["optimizer"]["master"].requires_grad
    views = copy["module"]["views"]
    assert views[0].untyped_storage().data_ptr() == views[1].untyped_storage().data_ptr()  # still one storage
    assert views[0].data_ptr() != state["module"]["views"][0].data_ptr()  # a copy, not the live tensor

    with torch.no_grad():  # training goes on: every tensor, list and value of the live state changes
        state["module"]["weight"].add_(1.0)
        state["module"]["views"][1].mul_(3.0)
        state["optimizer"]["state"][0]["step"] += 1
        state["optimizer"]["param_groups"][0]["lr"] = 5e-4
        state["module"]["views"].append(torch.zeros(1))
        state["args"].lr = 5e-4
    assert _saved(copy) == before


def _storages(obj) -> set[int]:
    """data_ptr of every tensor storage in ``obj``."""
    if isinstance(obj, torch.Tensor):
        return {obj.untyped_storage().data_ptr()}
    values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, list | tuple) else ()
    return set().union(*(_storages(v) for v in values))


def test_buffers_are_reused_once_the_copy_is_written():
    state = _state()
    copier = HostCopier()
    first = _storages(copier.copy(state))
    held = copier.held_bytes
    assert held == sum(s.nbytes() for s in {t.untyped_storage().data_ptr(): t.untyped_storage() for t in (
        state["module"]["weight"], state["module"]["views"][0], state["optimizer"]["state"][0]["exp_avg"],
        state["optimizer"]["state"][0]["step"], state["optimizer"]["master"], state["bf16"])}.values())
    copier.release()
    second = copier.copy(state)
    assert copier.held_bytes == held  # nothing new allocated: the same buffers
    assert _storages(second) == first
    assert _saved(second) == _saved(state)


def test_a_copy_of_a_device_tensor_records_the_device_its_file_would_name():
    """Where the state is on CUDA, the copy lives in host memory but its file names the device, as the synchronous
    save's does (checked here with a host storage registered as copied from cuda:0)."""
    copier = HostCopier()
    copy = copier.copy({"w": torch.ones(2)})
    storage = copy["w"].untyped_storage()
    host_copy._ORIGINS[storage._cdata] = "cuda:0"
    try:
        data = zipfile.ZipFile(io.BytesIO(_saved(copy)))
        pickled = data.read(next(n for n in data.namelist() if n.endswith("data.pkl")))
        assert b"cuda:0" in pickled and b"cpu" not in pickled
    finally:
        del host_copy._ORIGINS[storage._cdata]
    data = zipfile.ZipFile(io.BytesIO(_saved(copy)))
    assert b"cpu" in data.read(next(n for n in data.namelist() if n.endswith("data.pkl")))
