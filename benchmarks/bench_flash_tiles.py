"""Tile shapes of the flash attention kernels on this GPU: each kernel's candidates, timed alone.

    python benchmarks/bench_flash_tiles.py                 # hd 64 and 128, [4, 16, 2048, hd], bf16, dropout 0.1

The kernels' tiles are fixed per architecture and head dim in ``bloomtrain.kernels.flash_plans`` (never autotuned at
run time: a resumed run must be bit-exact). This script is how they are chosen: per kernel (forward, dK/dV, dQ) it
times every candidate (query rows x keys per tile, warps, pipeline stages), the launch plan's first choice for this
GPU among them (``plan`` in the JSON), and prints the fastest first; a candidate that does not fit the card is a row
with its error. ``bloomtrain build-kernels --targets ...`` says, without a GPU,
which candidates spill registers or overflow shared memory on each architecture.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import astuple
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bloomtrain.kernels import flash_attention as fa  # noqa: E402
from bloomtrain.kernels import flash_plans  # noqa: E402
from bloomtrain.model.alibi import alibi_slopes  # noqa: E402

CANDIDATES = {
    "fwd": [(128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (64, 64, 4, 3), (128, 32, 4, 4), (64, 128, 4, 3),
            (128, 64, 4, 4), (128, 128, 8, 2)],
    "dkdv": [(64, 64, 4, 3), (32, 128, 4, 3), (64, 128, 8, 3), (32, 64, 4, 4), (64, 64, 8, 2), (128, 64, 8, 2),
             (64, 128, 4, 2), (32, 128, 8, 3)],
    "dq": [(64, 64, 4, 3), (128, 64, 8, 3), (128, 32, 4, 3), (64, 32, 4, 4), (128, 64, 4, 2), (128, 128, 8, 2)],
}

# Around the H200's winners (2026-11-27) for a short re-check on a warm machine.
QUICK = {
    "fwd": [(64, 64, 4, 3), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 3)],
    "dkdv": [(64, 64, 4, 3), (128, 64, 8, 2), (64, 128, 8, 2), (32, 64, 4, 4)],
    "dq": [(64, 32, 4, 4), (64, 64, 4, 3), (128, 64, 8, 3), (128, 32, 8, 3)],
}


def _ms(fn, iters: int = 20) -> float:
    from triton.testing import do_bench  # noqa: PLC0415

    return do_bench(fn, warmup=5, rep=iters)


def sweep(b: int, heads: int, s: int, hd: int, dropout: float, dtype: torch.dtype) -> dict:
    gen = torch.Generator("cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, heads, s, hd, device="cuda", dtype=dtype, generator=gen) for _ in range(4))
    slopes = alibi_slopes(heads).cuda()
    seed = fa.draw_seed(q.device)
    scale = hd ** -0.5
    out, lse = fa._forward(q, k, v, slopes, seed, fa.Call(scale, dropout))
    bw = fa.backward_of(do, (q, k, v, out, lse, slopes, seed), fa.Call(scale, dropout))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    base = fa.plan(q)
    fa.launch_dq(bw, dq, base.dq[0])  # writes bw.delta, which the dK/dV kernel reads
    results: dict[str, Any] = {"plan": {kernel: list(astuple(base.tiles(kernel)[0])) for kernel in CANDIDATES}}
    for kernel, candidates in CANDIDATES.items():
        rows = []
        for cand in dict.fromkeys([astuple(base.tiles(kernel)[0]), *candidates]):  # the plan's first choice too
            tiles = flash_plans.Tiles(*cand)
            try:
                if kernel == "fwd":
                    ms = _ms(lambda t=tiles: fa._forward(q, k, v, slopes, seed, fa.Call(scale, dropout, tiles=t)))
                elif kernel == "dkdv":
                    ms = _ms(lambda t=tiles: fa.launch_dkdv(bw, dk, dv, t))
                else:
                    ms = _ms(lambda t=tiles: fa.launch_dq(bw, dq, t))
            except Exception as exc:  # a tile that does not fit the SM (shared memory, registers) is a row
                rows.append((cand, None, f"{type(exc).__name__}: {str(exc)[:60]}"))
                continue
            rows.append((cand, ms, None))
        rows.sort(key=lambda r: (r[1] is None, r[1] or 0))
        results[kernel] = rows
        print(f"[{b}, {heads}, {s}, {hd}] {dtype} dropout {dropout} {kernel}: " + "  ".join(
            f"{c}={ms:.3f}" if ms is not None else f"{c}=({err})" for c, ms, err in rows), flush=True)
    return results


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    p.add_argument("--dropout", type=float, nargs="+", default=[0.1, 0.0])
    p.add_argument("--json", default=None)
    p.add_argument("--write-tiles", default=None, help="write the fastest tiles per kernel for flash_attention.plan")
    p.add_argument("--quick", action="store_true", help="the three fastest candidates per kernel seen on an H200")
    return p


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_flash_tiles: needs a CUDA GPU", file=sys.stderr)
        return 2
    if a.quick:
        for kernel, rows in QUICK.items():
            CANDIDATES[kernel] = rows
    out = {f"hd{hd}_p{p}": sweep(4, 16, 2048, hd, p, torch.bfloat16) for hd in a.head_dims for p in a.dropout}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1, default=str) + "\n")
    if a.write_tiles:  # the fastest candidate per kernel at the first dropout, as flash_attention.plan reads it
        table = {str(flash_plans.head_dim_class(hd)): {k: list(out[f"hd{hd}_p{a.dropout[0]}"][k][0][0])
                                                       for k in CANDIDATES} for hd in a.head_dims}
        Path(a.write_tiles).write_text(json.dumps(table, indent=1) + "\n")
        print(f"tiles: {table} -> {a.write_tiles} (use with {flash_plans.TILES_ENV}={a.write_tiles})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
