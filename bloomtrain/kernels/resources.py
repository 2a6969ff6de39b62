"""What each GPU kernel needs per thread block, per target architecture, compiled on any machine (no GPU).

Triton kernels: every tile of every launch plan (bloomtrain.kernels.flash_plans) is compiled for
``GPUTarget("cuda", cc, 32)`` with the arguments of a training call (bf16 ``[4, 16, 2048, hd]`` in the model's
layout, dropout on: the Philox draws are the kernels' largest register cost) through Triton's own argument
specialisation, so the binary is the one a launch on that card would build. Triton's bundled ``cuobjdump
-res-usage`` reads its registers per thread and its stack frame (the bytes a thread spills to local memory);
Triton's metadata gives the shared memory it allocates. CUDA kernels (csrc/kernels): nvcc compiles each source to
a cubin for the target (``-Xptxas -v``: registers, spill stores, static shared memory); nothing runs.

A kernel *passes* on a target when it spills nothing and its shared memory fits the target's per-block limit.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from bloomtrain.kernels import build
from bloomtrain.kernels.flash_plans import CUDA_TILES, KERNELS, Tiles


@dataclass(frozen=True)
class Target:
    name: str
    capability: int
    shared_limit: int
    """Bytes of shared memory one block may use (cudaDevAttrMaxSharedMemoryPerBlockOptin)."""
    cards: str


TARGETS = {t.name: t for t in (
    Target("sm_80", 80, 166_912, "A100, A30"),
    Target("sm_86", 86, 101_376, "A10, A40, RTX 30xx"),
    Target("sm_89", 89, 101_376, "L4, L40S, RTX 40xx"),
    Target("sm_90", 90, 232_448, "H100, H200"),
)}
SHAPE = (4, 16, 2048)  # batch, heads, sequence of the representative call
TRITON_KERNELS = {"fwd": "attention_fwd_kernel", "dkdv": "attention_bwd_dkdv_kernel", "dq": "attention_bwd_dq_kernel"}


@dataclass(frozen=True)
class Usage:
    """One kernel on one target: its resources and whether they pass."""

    kernel: str
    head_dim: int | None
    target: str
    tiles: str
    """The plan's tiles (Triton), or "" for a CUDA kernel."""
    choice: int | None
    """Triton: 0 for the plan's first choice, 1.. for its fallbacks."""
    registers: int
    spill_bytes: int
    shared_bytes: int
    shared_limit: int

    @property
    def passed(self) -> bool:
        return self.spill_bytes == 0 and self.shared_bytes <= self.shared_limit

    def as_dict(self) -> dict:
        return dict(asdict(self), passed=self.passed)


def parse_targets(text: str) -> list[Target]:
    """``"sm_80,sm_90"`` -> the targets; an unknown name raises ValueError naming the known ones."""
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in TARGETS]
    if unknown or not names:
        raise ValueError(f"unknown target(s) {unknown or text!r}: expected a comma-separated list of {list(TARGETS)}")
    return [TARGETS[n] for n in names]


# --- Triton ------------------------------------------------------------------------------------------------------


def _triton_args(kernel: str, head_dim: int) -> tuple[list, dict]:
    """Positional and keyword arguments of a training call of ``kernel`` (tensors stand in for their pointers)."""
    import torch  # noqa: PLC0415

    from bloomtrain.kernels.dropout_mask import dropout_scale, dropout_threshold  # noqa: PLC0415

    b, heads, s = SHAPE
    block_d = max(16, 1 << (head_dim - 1).bit_length())
    x = torch.empty(16, dtype=torch.bfloat16)  # only dtype and alignment matter to the compiler
    stat, slopes, seed = torch.empty(16), torch.empty(16), torch.zeros(16, dtype=torch.int64)
    qkv = (s * heads * 3 * head_dim, 3 * head_dim, heads * 3 * head_dim)  # views of the [b, s, np, 3, hd] projection
    out = (s * heads * head_dim, head_dim, heads * head_dim)  # [b, s, np, hd] storage, as the kernels write it
    common = {"HEAD0": 0, "SQ": s, "SK": s, "qk_scale2": 0.18, "threshold": dropout_threshold(0.1),
              "keep_scale": dropout_scale(0.1), "HEAD_DIM": head_dim, "BLOCK_D": block_d, "EVEN_M": True,
              "EVEN_N": True, "DROPOUT": True, "DOT_MODE": "tf32"}
    if kernel == "fwd":
        return [x, x, x, slopes, seed, x, stat, *qkv, *qkv, *qkv, *out], common
    pointers = [x, x, x, x, slopes, seed, stat, stat, x, x]  # q k v dO slopes seed lse delta, then dk dv | out dq
    return [*pointers, *qkv, *qkv, *qkv, *out, *out, *out], dict(common, sm_scale=0.125)


def _cuobjdump() -> str:
    import triton  # noqa: PLC0415

    return str(Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump")


_RES_USAGE = re.compile(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)")


def triton_usage(kernel: str, head_dim: int, tiles: Tiles, target: Target, choice: int = 0) -> Usage:
    """Compile one kernel's tiles for ``target`` and read its resources."""
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # the launches' default, without its notice
    from triton.backends.compiler import GPUTarget  # noqa: PLC0415
    from triton.compiler import ASTSource, compile, make_backend  # noqa: PLC0415
    from triton.runtime.jit import create_function_from_signature  # noqa: PLC0415

    from bloomtrain.kernels import flash_triton  # noqa: PLC0415

    fn = getattr(flash_triton, TRITON_KERNELS[kernel])
    gpu = GPUTarget("cuda", target.capability, 32)
    backend = make_backend(gpu)
    args, kwargs = _triton_args(kernel, head_dim)
    kwargs.update(BLOCK_M=tiles.block_m, BLOCK_N=tiles.block_n, num_warps=tiles.num_warps,
                  num_stages=tiles.num_stages)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    compiled = compile(ASTSource(fn, signature, constexprs, attrs), target=gpu, options=options.__dict__)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "kernel.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        report = subprocess.run([_cuobjdump(), "-res-usage", str(cubin)], capture_output=True, text=True,
                                check=True).stdout
    match = _RES_USAGE.search(report)
    if match is None:
        raise RuntimeError(f"cuobjdump -res-usage printed no REG/STACK/SHARED line:\n{report}")
    registers, stack, static_shared = map(int, match.groups())
    return Usage(TRITON_KERNELS[kernel], head_dim, target.name, str(tiles), choice, registers, stack,
                 compiled.metadata.shared + static_shared, target.shared_limit)


def plan_jobs(targets: list[Target], head_dims: list[int], kernels: tuple[str, ...] = KERNELS,
              first_only: bool = False) -> list[tuple]:
    """Every (kernel, head dim, tiles, target, choice) to compile: each tile of each plan, or each first choice."""
    from bloomtrain.kernels.flash_plans import head_dim_class  # noqa: PLC0415

    jobs = []
    for target in targets:
        for head_dim in head_dims:
            plan = CUDA_TILES[target.name][head_dim_class(head_dim)]
            for kernel in kernels:
                candidates = plan.tiles(kernel)[:1] if first_only else plan.tiles(kernel)
                jobs += [(kernel, head_dim, tiles, target, i) for i, tiles in enumerate(candidates)]
    return jobs


def _triton_job(job: tuple) -> Usage:
    return triton_usage(*job)


# --- CUDA (csrc/kernels) -----------------------------------------------------------------------------------------

_PTXAS_ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(sm_\d+)'")
_PTXAS_STACK = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    candidates = sorted(Path("/usr/local").glob("cuda*/bin/nvcc"))
    return str(candidates[-1]) if candidates else None


def cuda_usage(source: str, target: Target, compiler: str) -> list[Usage]:
    """Compile one csrc/kernels source to a cubin for ``target`` and read ptxas's report of every kernel in it."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [compiler, "-cubin", "-std=c++17", f"-arch={target.name}", *build.NVCC_FLAGS, "-Xptxas", "-v",
             str(build.source_dir() / source), "-o", str(Path(tmp) / "out.cubin")],
            capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed on {source} for {target.name}:\n{proc.stderr[-2000:]}")
    return [Usage(_demangle(name), None, target.name, "", None, regs, spill, smem, target.shared_limit)
            for name, regs, spill, smem in _ptxas_entries(proc.stderr)]


def _ptxas_entries(log: str) -> list[tuple[str, int, int, int]]:
    """(mangled name, registers, spill-store bytes, static shared bytes) of each entry function in a ptxas -v log."""
    entries = []
    for block in re.split(r"(?=ptxas info\s+: Compiling entry function)", log):
        entry = _PTXAS_ENTRY.search(block)
        if entry is None:
            continue
        stack = _PTXAS_STACK.search(block)
        used = re.search(r"Used (\d+) registers", block)
        smem = re.search(r"(\d+) bytes smem", block)
        entries.append((entry.group(1), int(used.group(1)) if used else 0, int(stack.group(2)) if stack else 0,
                        int(smem.group(1)) if smem else 0))
    return entries


@functools.cache
def _demangle(name: str) -> str:
    """``bloomkernels::cuda::(anonymous namespace)::layer_norm_fwd_kernel<__nv_bfloat16, 8>(...)`` ->
    ``layer_norm_fwd_kernel<__nv_bfloat16, 8>``; the mangled name where c++filt is missing."""
    filt = shutil.which("c++filt")
    if filt is None:
        return name
    text = subprocess.run([filt, name], capture_output=True, text=True).stdout.strip()
    head = text.replace("(anonymous namespace)::", "").split("(")[0]  # the return type and the qualified name
    template = head.find("<")
    start = head.rfind("::", 0, template if template >= 0 else len(head))
    return head[start + 2:] if start >= 0 else head.split(" ")[-1]


def _compiler_process() -> None:
    os.environ.pop("TRITON_INTERPRET", None)


def _cuda_job(job: tuple) -> list[Usage]:
    return cuda_usage(*job)


def check(targets: list[Target], head_dims: list[int], *, cuda: bool = True, first_only: bool = False,
          workers: int | None = None) -> list[Usage]:
    """Every plan's Triton kernels and (with ``cuda``, where nvcc is installed) the csrc/ CUDA kernels on every
    target, compiled in ``workers`` processes (default: one per core)."""
    compiler = nvcc() if cuda else None
    cuda_jobs = [(src, t, compiler) for t in targets for src in build.CUDA_SOURCES] if compiler else []
    return usages(plan_jobs(targets, head_dims, first_only=first_only), cuda_jobs, workers)


def usages(triton_jobs: list[tuple], cuda_jobs: Sequence[tuple] = (), workers: int | None = None) -> list[Usage]:
    """The usages of Triton jobs ``(kernel, head dim, tiles, target, choice)`` and CUDA jobs ``(source, target,
    nvcc)``, in that order, compiled in fresh processes: a parent may have imported triton in its interpreter mode
    (TRITON_INTERPRET=1, the CPU tests), which cannot compile; the workers drop that variable first."""
    workers = workers or min(len(os.sched_getaffinity(0)), max(1, len(triton_jobs) + len(cuda_jobs)))
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_compiler_process) as pool:
        triton_done = pool.map(_triton_job, triton_jobs)
        cuda_done = pool.map(_cuda_job, cuda_jobs)
        found = list(triton_done)
        for more in cuda_done:
            found += more
    return found


def table(usages: list[Usage]) -> list[str]:
    """The rows ``bloomtrain build-kernels --targets`` prints: one per kernel, head dim, tiles and target."""
    import triton  # noqa: PLC0415

    head = f"{'kernel':<46} {'hd':>4} {'target':<6} {'tiles':<12} {'#':>2} {'regs':>4} {'spill B':>7} " \
           f"{'shared B':>8} {'limit':>7}  verdict"
    lines = [f"# triton {triton.__version__}, ptxas of its bundle; nvcc for csrc/ (bf16 [4, 16, 2048, hd], dropout "
             "on, model layout)", head, "-" * len(head)]
    for u in usages:
        verdict = "ok" if u.passed else ", ".join(
            ([f"spills {u.spill_bytes} B"] if u.spill_bytes else [])
            + ([f"shared memory {u.shared_bytes:,} > {u.shared_limit:,} B"] if u.shared_bytes > u.shared_limit
               else []))
        choice = "" if u.choice is None else u.choice + 1  # 1: the plan's first choice, 2..: its fallbacks
        lines.append(f"{u.kernel[:46]:<46} {u.head_dim or '-':>4} {u.target:<6} {u.tiles:<12} {choice:>2} "
                     f"{u.registers:>4} {u.spill_bytes:>7} {u.shared_bytes:>8} {u.shared_limit:>7}  {verdict}")
    return lines
