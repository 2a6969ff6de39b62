"""Launch plans of the flash attention kernels: tile shapes per GPU architecture and head dim, never autotuned.

A plan names, per kernel (forward, dK/dV, dQ), its tiles (query rows x keys, warps, software-pipeline stages) in
order of preference: a launch that runs out of resources (shared memory, registers) takes the next, with one
warning (bloomtrain.kernels.flash_attention). Plans are keyed by architecture because the cards differ in what a
block may hold: 163 KiB of shared memory on sm_80 (A100), 99 KiB on sm_86 / sm_89 (A10, A40, RTX 30xx; L4, L40S,
RTX 40xx), 227 KiB on sm_90 (H100, H200), and 64 K registers per SM everywhere (255 per thread at most: past that a
kernel spills to local memory, which is slow). ``bloomtrain build-kernels --targets sm_80,sm_86,sm_89,sm_90``
compiles every plan for every target on any machine (no GPU needed) and fails when one spills or does not fit
(bloomtrain.kernels.resources); the tests run it on a subset.

Fixed, never autotuned at run time: a timing-dependent choice would change the summation order between runs, and a
resumed run must be bit-exact. ``$BLOOMTRAIN_FLASH_TILES`` may name a JSON file with another table for this GPU
(``benchmarks/bench_flash_tiles.py --write-tiles``). How the tiles were chosen: docs/bloom-training.md.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass

KERNELS = ("fwd", "dkdv", "dq")
HEAD_DIM_CLASSES = (64, 128, 256)  # a head dim takes the plan of the smallest class at least as large
TILES_ENV = "BLOOMTRAIN_FLASH_TILES"


@dataclass(frozen=True)
class Tiles:
    """One kernel's launch shape: query rows and keys per tile, warps and software-pipeline stages."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    def __str__(self) -> str:
        return f"{self.block_m}x{self.block_n} w{self.num_warps} s{self.num_stages}"


@dataclass(frozen=True)
class LaunchPlan:
    """Each kernel's tiles, first choice first; the rest are its fallbacks."""

    fwd: tuple[Tiles, ...]
    dkdv: tuple[Tiles, ...]
    dq: tuple[Tiles, ...]

    def tiles(self, kernel: str) -> tuple[Tiles, ...]:
        return getattr(self, kernel)


TileRows = Sequence[tuple[int, int, int, int]]  # (query rows, keys, warps, stages) per tile, first choice first


def _plan(fwd: TileRows, dkdv: TileRows, dq: TileRows) -> LaunchPlan:
    return LaunchPlan(*(tuple(Tiles(*t) for t in tiles) for tiles in (fwd, dkdv, dq)))


# (query rows, keys, warps, stages) per kernel, first choice first. The first choices are the H200 sweep's winners
# (benchmarks/RESULTS.md, [4, 16, 2048, hd] bf16, dropout 0.1) where they neither spill nor overflow shared memory on
# that target, else the nearest candidate that does neither (more warps: fewer registers a thread); each fallback
# takes less shared memory. `bloomtrain build-kernels --targets sm_80,sm_86,sm_89,sm_90` shows every one passes
# (benchmarks/RESULTS.md, "Kernels that fit every GPU"): e.g. dK/dV at hd 128 spilled 280 B a thread at 64 x 64 on
# sm_90, the forward at hd 128, 128 x 64 x 3 stages, needs 104 KiB of shared memory, more than sm_86 / sm_89 have.
_HD64 = ([(64, 64, 4, 3), (64, 32, 4, 2)], [(64, 64, 8, 2), (64, 32, 4, 2)], [(64, 32, 4, 4), (32, 32, 4, 2)])
_DQ128 = [(64, 32, 4, 4), (32, 32, 4, 2)]
_HD256 = ([(64, 32, 8, 2), (32, 32, 4, 1)], [(32, 32, 8, 2), (16, 32, 4, 1)], [(32, 32, 4, 2), (16, 32, 4, 1)])
CUDA_TILES: dict[str, dict[int, LaunchPlan]] = {
    "sm_90": {
        64: _plan([(64, 64, 4, 3), (64, 32, 4, 2)], [(64, 64, 8, 3), (32, 64, 4, 2)], [(64, 32, 4, 4), (32, 32, 4, 2)]),
        128: _plan([(128, 64, 8, 3), (64, 32, 4, 2)], [(32, 64, 8, 2), (32, 32, 4, 2)], _DQ128),
        256: _plan(*_HD256),
    },
    "sm_80": {
        64: _plan(*_HD64),
        128: _plan([(128, 64, 8, 3), (64, 32, 4, 2)], [(64, 64, 8, 2), (32, 64, 8, 2)], _DQ128),
        256: _plan(*_HD256),
    },
    "sm_86": {  # 99 KiB of shared memory a block: the hd 128 forward takes 128 x 32 tiles (68 KiB), not 128 x 64
        64: _plan(*_HD64),
        128: _plan([(128, 32, 8, 3), (64, 32, 4, 2)], [(64, 64, 8, 2), (32, 64, 8, 2)], _DQ128),
        256: _plan(*_HD256),
    },
}
CUDA_TILES["sm_89"] = CUDA_TILES["sm_86"]  # Ada (L4, L40S, RTX 40xx): sm_86's limits; its binaries measure the same
# Architectures without a table of their own take the one whose limits they share or exceed.
ARCH_ALIASES = {"sm_87": "sm_80", "sm_100": "sm_90", "sm_103": "sm_90", "sm_120": "sm_86", "sm_121": "sm_86"}
FALLBACK_ARCH = "sm_86"  # the smallest shared memory of the tables: fits any card of compute capability >= 8.0

# The interpreter (CPU tests): small tiles of different shapes per kernel, so the tests cross block edges.
INTERPRETER_PLAN = _plan([(32, 16, 4, 1), (16, 16, 4, 1)], [(16, 32, 4, 1), (16, 16, 4, 1)],
                         [(32, 16, 4, 1), (16, 16, 4, 1)])


def head_dim_class(head_dim: int) -> int:
    return next(c for c in HEAD_DIM_CLASSES if head_dim <= c)


def arch(capability: tuple[int, int]) -> str:
    """The table a device of this compute capability uses: ``sm_<major><minor>``, an alias, or ``FALLBACK_ARCH``."""
    name = f"sm_{capability[0]}{capability[1]}"
    if name in CUDA_TILES:
        return name
    return ARCH_ALIASES.get(name, FALLBACK_ARCH)


def plan(head_dim: int, capability: tuple[int, int] | None) -> LaunchPlan:
    """The plan of a head dim on a device of this compute capability; None: the interpreter's."""
    if capability is None:
        return INTERPRETER_PLAN
    cls = head_dim_class(head_dim)
    measured = _tiles_file(os.environ.get(TILES_ENV, "")) or {}
    return measured.get(cls) or CUDA_TILES[arch(capability)][cls]


@functools.cache
def _tiles_file(path: str) -> dict[int, LaunchPlan] | None:
    """``{"64": {"fwd": [m, n, warps, stages] or a list of them, "dkdv": ..., "dq": ...}, "128": ...}`` (the classes
    it names; the others keep the table's plans), or None without a path."""
    if not path:
        return None
    with open(path) as f:
        raw = json.load(f)

    def tiles(value: list) -> tuple[Tiles, ...]:
        return tuple(Tiles(*t) for t in value) if isinstance(value[0], list) else (Tiles(*value),)

    return {int(k): LaunchPlan(*(tiles(v[name]) for name in KERNELS)) for k, v in raw.items()}
