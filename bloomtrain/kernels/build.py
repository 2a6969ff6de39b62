"""Build and load the fused kernel extension (csrc/kernels) with torch.utils.cpp_extension + ninja.

Design: the extension is JIT-built on first use, or ahead of time with ``bloomtrain build-kernels``.
The build directory is ``$BLOOMSTACK_KERNEL_CACHE`` (default ``~/.cache/bloomstack/kernels``) /
``<hash>``, where the hash covers every source byte, the Python environment (interpreter prefix and version,
and the torch build: version, git commit, install directory), the CUDA version, the flags and the CUDA arch
list, so a stale build is never loaded and an unchanged tree never rebuilds. Two environments on one machine
(two venvs with the same torch version) get two builds: with one key, each compiled against its own torch
headers and libraries over the other's build on every start (a restarted job spent 100 s recompiling). A file lock
serialises concurrent builders (DDP ranks, pytest workers); the losers wait and then load the
winner's ``.so``. The build runs the pip ``ninja`` whatever else PATH holds (two ninja versions rebuilt over
each other's logs). Flags are portable (``-O3``, no ``-march=native``) because the cache may be shared
between machines; the CPU kernels get their SIMD from ``#pragma omp simd``, built twice on x86-64 (baseline
and AVX2 + FMA, chosen at run time from CPUID: ``ext.cpu_isa()``).

A failed build is remembered for the rest of the process (``try_load`` is cached): callers fall
back to the PyTorch reference with one log line instead of recompiling on every call.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from bloomdata.environ import environ_restored

logger = logging.getLogger("bloomtrain.kernels")

CPU_SOURCES = ("layer_norm_cpu.cpp", "bias_gelu_cpu.cpp", "alibi_softmax_cpu.cpp", "cpu_avx2.cpp", "bindings.cpp")
CUDA_SOURCES = ("layer_norm_cuda.cu", "bias_gelu_cuda.cu", "alibi_softmax_cuda.cu")
DEVICE_TYPES = ("cpu", "cuda")  # the device types the extension serves
HEADERS = ("cpu_common.h", "cpu_kernels.h", "cpu_kernels_decl.h", "cuda_kernels.h", "cuda_common.cuh")

# -fno-trapping-math lets GCC turn the clamps and max-reductions of the CPU kernels into SIMD
# selects (it changes no IEEE result, only whether a comparison may raise an FP exception).
CXX_FLAGS = ("-O3", "-fopenmp", "-fno-trapping-math")
LD_FLAGS = ("-fopenmp",)
# As Megatron's fused_kernels build: fast math and relaxed constexpr for the bf16/half intrinsics.
NVCC_FLAGS = ("-O3", "--use_fast_math", "--expt-relaxed-constexpr", "-U__CUDA_NO_HALF_OPERATORS__",
              "-U__CUDA_NO_HALF_CONVERSIONS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__")


class KernelBuildError(RuntimeError):
    """The extension could not be compiled or imported; the message says why."""


def source_dir() -> Path:
    """csrc/kernels of this checkout (the package is installed editable from the repository)."""
    return Path(__file__).resolve().parents[2] / "csrc" / "kernels"


def cache_root() -> Path:
    env = os.environ.get("BLOOMSTACK_KERNEL_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "bloomstack" / "kernels"


@functools.cache
def cuda_buildable() -> bool:
    """True when torch has CUDA and a CUDA toolkit (nvcc) is installed for the build."""
    import torch  # noqa: PLC0415
    from torch.utils.cpp_extension import CUDA_HOME  # noqa: PLC0415

    return torch.version.cuda is not None and torch.cuda.is_available() and CUDA_HOME is not None


def build_key(with_cuda: bool) -> str:
    """Hash of everything that changes the binary: sources, headers, flags, the Python environment and its torch
    build, CUDA, arch list."""
    import torch  # noqa: PLC0415

    h = hashlib.sha256()
    names = CPU_SOURCES + HEADERS + (CUDA_SOURCES if with_cuda else ())
    for name in sorted(names):
        path = source_dir() / name
        h.update(name.encode())
        h.update(path.read_bytes() if path.exists() else b"<missing>")
    environment = [sys.prefix, sys.version.split()[0], torch.__version__, str(torch.version.git_version),
                   str(Path(torch.__file__).resolve().parent)]
    parts = [*environment, str(torch.version.cuda), str(with_cuda),
             " ".join(CXX_FLAGS + LD_FLAGS + NVCC_FLAGS), os.environ.get("TORCH_CUDA_ARCH_LIST", "")]
    h.update("|".join(parts).encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _our_ninja_first() -> Iterator[None]:
    """While the extension builds, the pip ``ninja`` (a dependency of this package) comes first on PATH; torch
    runs whichever ``ninja`` PATH finds. Debian's ninja 1.11 and pip's 1.13 record a command's hash in the
    build directory's log differently, so each one rebuilt the whole extension (~40 s) whenever the other had
    built last: runs from an activated venv (its bin first on PATH) and from ``.venv/bin/python`` (the
    system's ninja first) took turns, five rebuilds in one run of the test suite. Without the pip package,
    PATH is left as it is."""
    try:
        import ninja  # noqa: PLC0415

        bin_dir = getattr(ninja, "BIN_DIR", None)
    except ImportError:
        bin_dir = None
    if not bin_dir:
        yield
        return
    with environ_restored(["PATH"]):
        os.environ["PATH"] = os.pathsep.join([bin_dir, *filter(None, [os.environ.get("PATH")])])
        yield


def load(with_cuda: bool, verbose: bool = False) -> ModuleType:
    """Build (if needed) and import the extension; raises KernelBuildError with the reason."""
    import filelock  # noqa: PLC0415
    from torch.utils import cpp_extension  # noqa: PLC0415

    key = build_key(with_cuda)
    build_dir = cache_root() / key
    build_dir.mkdir(parents=True, exist_ok=True)
    sources = [str(source_dir() / s) for s in CPU_SOURCES]
    if with_cuda:
        sources += [str(source_dir() / s) for s in CUDA_SOURCES]
    missing = [s for s in sources if not Path(s).exists()]
    if missing:
        raise KernelBuildError(f"kernel sources missing: {missing} (expected under {source_dir()})")
    name = f"bloomstack_kernels_{'cuda' if with_cuda else 'cpu'}_{key[:8]}"
    started = time.perf_counter()
    try:
        with filelock.FileLock(str(build_dir / "build.lock")), _our_ninja_first():
            module = cpp_extension.load(
                name=name,
                sources=sources,
                extra_cflags=list(CXX_FLAGS) + (["-DBLOOM_WITH_CUDA"] if with_cuda else []),
                extra_ldflags=list(LD_FLAGS),
                extra_cuda_cflags=list(NVCC_FLAGS),
                build_directory=str(build_dir),
                with_cuda=with_cuda,
                verbose=verbose,
            )
    except Exception as exc:  # compiler errors arrive as RuntimeError/CalledProcessError/ImportError
        last = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
        raise KernelBuildError(f"building {name} in {build_dir} failed: {last[0]} "
                               f"(rerun `bloomtrain build-kernels --verbose` for the compiler log)") from exc
    logger.debug("loaded %s from %s in %.1fs", name, build_dir, time.perf_counter() - started)
    return module


@functools.cache
def try_load(with_cuda: bool) -> tuple[ModuleType | None, str | None]:
    """(module, None) or (None, reason); cached so a failed build is tried once per process."""
    try:
        return load(with_cuda), None
    except KernelBuildError as exc:
        return None, str(exc)


def extension_for(device_type: str) -> tuple[ModuleType | None, str | None]:
    """The extension that serves tensors on ``device_type`` ("cpu" or "cuda"), or the reason none does."""
    if device_type == "cuda":
        if not cuda_buildable():
            return None, "no CUDA toolkit (nvcc/CUDA_HOME) to build the CUDA kernels"
        return try_load(True)
    if device_type not in DEVICE_TYPES:
        return None, f"no fused kernels for device type {device_type!r}"
    # A CUDA build serves CPU tensors too; reuse it when this process has a GPU rather than building twice.
    return try_load(cuda_buildable())

