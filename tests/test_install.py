"""``make install``'s choice of torch, read from ``make -n`` (nothing runs): the CPU build from PyTorch's CPU index
on a machine without an NVIDIA driver, PyPI's CUDA build where one is (``nvidia-smi`` on PATH or
``/proc/driver/nvidia``), one line saying which and how to override, and TORCH_SPEC/TORCH_INDEX winning."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # runs make (tests/tiers.py)

ROOT = Path(__file__).resolve().parents[1]
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"


def dry_install(tmp_path: Path, driver: str, *args: str) -> tuple[str, str]:
    """(the line make install prints about torch, its pip line for torch) with ``driver``: "smi" (a fake
    nvidia-smi on an otherwise empty PATH), "proc" (NVIDIA_PROC exists) or "none"."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if driver == "smi":
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    proc = tmp_path / "proc-driver-nvidia"
    if driver == "proc":
        proc.mkdir()
    run = subprocess.run([shutil.which("make"), "-n", "install", f"VENV={tmp_path / 'venv'}", f"NVIDIA_PROC={proc}",
                          *args], cwd=ROOT, env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    said = [x for x in run.stdout.splitlines() if x.startswith('echo "make install: torch:')]
    pip = [x for x in run.stdout.splitlines() if "pip install" in x and "torch" in x and "-e " not in x]
    assert len(said) == 1, run.stdout
    return said[0], (pip or [""])[0]


def test_without_an_nvidia_driver_make_install_takes_the_cpu_build(tmp_path):
    said, pip = dry_install(tmp_path, "none", "TORCH_CPU_INDEX_UP=yes")
    assert "no NVIDIA driver here" in said and "the CPU build" in said and "TORCH_SPEC=" in said, said
    assert pip.endswith(f'{CPU_INDEX} "torch==2.13.0+cpu"'), pip


def test_where_pytorchs_index_does_not_resolve_the_cpu_build_comes_from_pips_own_sources(tmp_path):
    said, pip = dry_install(tmp_path, "none", "TORCH_CPU_INDEX_UP=")
    assert "the CPU build" in said and "PyTorch's CPU index does not resolve here" in said, said
    assert pip.endswith('--no-compile  "torch==2.13.0+cpu"') and "whl/cpu" not in pip, pip


@pytest.mark.parametrize("driver", ["smi", "proc"])
def test_with_an_nvidia_driver_make_install_takes_the_cuda_build(tmp_path, driver):
    said, pip = dry_install(tmp_path, driver)
    assert "an NVIDIA driver is here: the CUDA build" in said and "from PyPI" in said, said
    assert pip.endswith('--no-compile  "torch==2.13.0"') and "whl/cpu" not in pip, pip


def test_torch_spec_and_index_override_the_choice(tmp_path):
    cu128 = "--index-url https://download.pytorch.org/whl/cu128"
    said, pip = dry_install(tmp_path, "none", "TORCH_SPEC=torch==2.13.0", f"TORCH_INDEX={cu128}")
    assert "as TORCH_SPEC/TORCH_INDEX say" in said and pip.endswith(f'{cu128} "torch==2.13.0"'), (said, pip)
    said, pip = dry_install(tmp_path, "smi", "TORCH_SPEC=")
    assert "the machine's own torch" in said and pip == "", (said, pip)
