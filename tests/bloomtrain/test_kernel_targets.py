"""``bloomtrain build-kernels --targets``: every GPU kernel compiled for sm_80 / sm_86 / sm_89 / sm_90 on this CPU
machine (Triton compiles for a GPUTarget without a device; its bundled cuobjdump reads the registers, the stack a
thread spills to and the shared memory; nvcc -Xptxas -v does the same for csrc/), one row per kernel, head dim and
target, exit 1 when one spills or does not fit.

``make test`` runs the flash plans' first choices at BLOOM's head dims 64 and 128 on sm_80 and sm_90, and every
csrc/ kernel there, without Triton's cache (what a fresh machine compiles); the CLI's default compiles every
plan's fallbacks too, at head dims 64, 128 and 256, for whichever targets it is given (docs/bloom-training.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bloomdata.errors import BloomstackError
from bloomtrain.cli import build_kernels
from bloomtrain.kernels import resources
from bloomtrain.kernels.flash_plans import CUDA_TILES, FALLBACK_ARCH, HEAD_DIM_CLASSES, Tiles, arch, plan

ROOT = Path(__file__).resolve().parents[2]


def _compile_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # conftest's interpreter cannot compile
    return dict(env, TRITON_CACHE_DIR=str(tmp_path / "triton-cache"))  # a fresh cache: every kernel compiles


@pytest.mark.integration
def test_bloom_plans_and_csrc_kernels_fit_sm80_and_sm90(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "bloomtrain.cli", "build-kernels", "--targets", "sm_80,sm_90",
                           "--head-dims", "64,128", "--first-only"], capture_output=True, text=True, cwd=ROOT,
                          env=_compile_env(tmp_path), timeout=1200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("attention_")]
    seen = {(r[0], r[1], r[2]) for r in rows}
    assert seen == {(f"attention_{k}_kernel", hd, t) for k in ("fwd", "bwd_dkdv", "bwd_dq") for hd in ("64", "128")
                    for t in ("sm_80", "sm_90")}, seen
    for row in rows:  # kernel hd target MxN wW sS # regs spill shared limit verdict
        registers, spill, shared, limit = (int(x) for x in row[7:11])
        assert 0 < registers <= 255 and spill == 0 and shared <= limit and row[11] == "ok", row
    if resources.nvcc() is not None:
        csrc = [line.split() for line in proc.stdout.splitlines() if line.startswith(("layer_norm", "bias_gelu",
                                                                                      "alibi_softmax"))]
        # ... target regs spill shared limit verdict (the name may hold spaces; tiles and # are empty)
        assert len(csrc) >= 20 and {r[-6] for r in csrc} == {"sm_80", "sm_90"}, proc.stdout
        assert all(r[-1] == "ok" and int(r[-4]) == 0 for r in csrc), proc.stdout
    assert proc.stdout.rstrip().endswith("none spills, all fit")


@pytest.mark.integration
def test_the_check_sees_spills_and_shared_memory_overflow():
    """Tiles known to spill on sm_90 (the dK/dV kernel at 64 x 64 on 4 warps) and to overflow a 99 KiB card (the
    forward at 128 x 64, 3 stages, head dim 128 on sm_86): the rows fail, so a plan like them cannot pass."""
    usages = resources.usages([("dkdv", 64, Tiles(64, 64, 4, 3), resources.TARGETS["sm_90"], 0),
                               ("fwd", 128, Tiles(128, 64, 8, 3), resources.TARGETS["sm_86"], 0)])
    spilling, overflowing = usages
    assert spilling.spill_bytes > 0 and not spilling.passed
    assert overflowing.shared_bytes > overflowing.shared_limit == 101_376 and not overflowing.passed
    lines = resources.table(usages)
    assert f"spills {spilling.spill_bytes} B" in lines[-2] and "shared memory" in lines[-1]


def test_the_cli_exits_1_naming_what_failed(monkeypatch, capsys):
    bad = resources.Usage("attention_bwd_dkdv_kernel", 64, "sm_90", "64x64 w4 s3", 0, 255, 48, 59_392, 232_448)
    good = resources.Usage("layer_norm_fwd_kernel<float, 1>", None, "sm_90", "", None, 18, 0, 128, 232_448)
    monkeypatch.setattr(resources, "check", lambda *args, **kwargs: [good, bad])
    assert build_kernels.main(["--targets", "sm_90"]) == 1
    out = capsys.readouterr().out
    assert "spills 48 B" in out and out.rstrip().endswith("1 spill or do not fit")
    monkeypatch.setattr(resources, "check", lambda *args, **kwargs: [good])
    assert build_kernels.main(["--targets", "sm_90"]) == 0


def test_targets_and_head_dims_are_validated():
    with pytest.raises(BloomstackError, match=r"--targets: .*unknown target\(s\) \['sm_75'\]: expected .*'sm_80'"):
        build_kernels.parser().parse(["--targets", "sm_75"])
    with pytest.raises(BloomstackError, match=r"--head-dims: .*head dims in \[1, 256\], got '64,512'"):
        build_kernels.parser().parse(["--targets", "sm_90", "--head-dims", "64,512"])
    assert [t.name for t in resources.parse_targets("sm_80, sm_86,sm_89 ,sm_90")] == ["sm_80", "sm_86", "sm_89",
                                                                                     "sm_90"]


def test_plans_are_keyed_by_architecture():
    assert set(CUDA_TILES) == set(resources.TARGETS)
    assert all(set(CUDA_TILES[a]) == set(HEAD_DIM_CLASSES) for a in CUDA_TILES)
    assert arch((9, 0)) == "sm_90" and arch((8, 9)) == "sm_89" and arch((8, 7)) == "sm_80"
    assert arch((7, 5)) == FALLBACK_ARCH and arch((12, 0)) == "sm_86"
    assert plan(80, (9, 0)) == CUDA_TILES["sm_90"][128] and plan(64, (8, 6)) == CUDA_TILES["sm_86"][64]
    for target in CUDA_TILES.values():  # every kernel has a fallback
        assert all(len(p.tiles(k)) >= 2 for p in target.values() for k in ("fwd", "dkdv", "dq"))
