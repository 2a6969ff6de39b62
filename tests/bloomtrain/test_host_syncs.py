"""Host syncs per training step: every place one iteration reads a tensor's value on the host, or waits for the
device, is listed below with its reason (issue 27: "any other per-step host sync gets a reason or goes").

On a GPU each such read waits for the device's queue to drain, and the host then issues nothing until it returns:
one per step is the floor (the loss, and the optimizer's decision to skip a non-finite step). The count runs on the CPU
with gloo: a callback opens a window at iteration 3's first hook and closes it at iteration 4's, and meanwhile every
Python-level value read (``item``, ``tolist``, ``bool``/``float``/``int``/``index`` of a tensor, ``numpy``) and
every ``synchronize`` of DeepSpeed's accelerator or of torch.cuda is recorded with the first caller outside torch.
Reads inside C++ (a boolean-mask index, ``nonzero``) are not seen; branches taken only on CUDA are not run.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import ClassVar

import pytest
import torch

from bloomtrain.callbacks import Callback
from tests.bloomtrain.train_helpers import EXACT, FORCE_BF16, train_rank
from tests.harness.gloo_harness import run_distributed

pytestmark = pytest.mark.integration  # tests/tiers.py

READS = ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")
TORCH = str(Path(torch.__file__).parent)

# site (package-relative file:function) -> why it is there. "host tensor": the tensor lives in host memory in a
# GPU run too (no device wait). Any site not listed fails the test; so does a listed one that no longer occurs.
EXPECTED = {
    "bloomtrain/parallel/layers.py:check_token_range":
        "host tensors: each micro-batch's ids before their pinned, non-blocking copy (bloomtrain.data.to_device); "
        "the embedding reads ids only when they are on the CPU",
    "bloomtrain/train_module.py:train_step":
        "the step's one wait on purpose: the loss as a float, for the step time and the callbacks (the grad "
        "norm read after it is free)",
    "bloomtrain/bf16_optimizer.py:step":
        "the global norm, read once: the engine decides on the host whether to skip a non-finite step (the clip "
        "stays on the device; fused AdamW keeps its step counts there)",
    "bloomtrain/callbacks/stop_requests.py:check":
        "host tensor with one rank or gloo: the stop flags (NCCL: a round trip of 12 bytes after the loss's wait)",
    "bloomtrain/callbacks/stragglers.py:post_train_batch":
        "host tensors: each rank's busy seconds, all-gathered every log interval on a gloo group (also in a GPU run); "
        "more than one rank only",
}
MULTI_RANK = {"bloomtrain/callbacks/stragglers.py:post_train_batch"}  # sites a one-rank run has no reason for


def _site() -> str:
    """The first caller outside torch and this module, as ``package/relative/file.py:function``."""
    frame = sys._getframe(2)
    while frame.f_code.co_filename.startswith(TORCH) or frame.f_code.co_filename == __file__:
        frame = frame.f_back
    parts = Path(frame.f_code.co_filename).parts
    inner = max((i for i, part in enumerate(parts) if part in ("bloomtrain", "bloomdata", "deepspeed", "tests")),
                default=0)
    return f"{'/'.join(parts[inner:])}:{frame.f_code.co_name}"


class SyncCounter(Callback):
    """Records the value reads and device waits of iteration ``iteration``, from its first hook to the next one's."""

    priority: ClassVar[int] = 1000  # above every project callback: the window opens before their hooks

    def __init__(self, iteration: int) -> None:
        self.iteration = iteration
        self.recorded: list[tuple[str, str]] = []
        self._undo: list[tuple[object, str, object]] = []

    def _wrap(self, owner: object, name: str) -> None:
        original = getattr(owner, name)

        def counted(*args, **kwargs):
            self.recorded.append((name, _site()))
            return original(*args, **kwargs)

        self._undo.append((owner, name, original))
        setattr(owner, name, counted)

    def _open(self) -> None:
        from deepspeed.accelerator import get_accelerator  # noqa: PLC0415

        for name in READS:
            self._wrap(torch.Tensor, name)
        self._wrap(get_accelerator(), "synchronize")
        self._wrap(torch.cuda, "synchronize")

    def _close(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()

    def pre_step(self, trainer, step) -> None:
        if step.iteration == self.iteration:
            self._open()
        elif self._undo:
            self._close()

    def close(self, trainer) -> None:
        self._close()


def _counter() -> list[Callback]:
    return [SyncCounter(3)]


@pytest.mark.parametrize(("tp", "pp"), [(1, 1), (1, 2), (2, 1)], ids=["one-rank", "pp2", "tp2"])
def test_every_host_sync_of_a_step_has_a_reason(tp, pp):
    """bf16 (the lean BF16 optimizer, ZeRO-1), clipping on, iteration 3 of 4: the sites are the list above."""
    overrides = [*EXACT, *FORCE_BF16, "schedule.train_iters=4", f"parallel.tp={tp}", f"parallel.pp={pp}"]
    runs = run_distributed(train_rank, tp * pp, overrides, None, _counter, timeout_s=300)
    union: set[str] = set()
    for rank, run in enumerate(runs):
        assert run["error"] is None, run["error"]
        seen = Counter(site for _, site in run["recorded"][0])
        kinds = sorted({kind for kind, _ in run["recorded"][0]})
        assert set(seen) <= set(EXPECTED), (rank, seen, kinds)
        assert "synchronize" not in kinds, (rank, run["recorded"][0])
        union |= set(seen)
    assert union == set(EXPECTED) - (MULTI_RANK if tp * pp == 1 else set())
