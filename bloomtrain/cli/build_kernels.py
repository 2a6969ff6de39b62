"""`bloomtrain build-kernels [--cuda | --cpu-only] [--verbose] [--targets sm_80,sm_86,sm_89,sm_90]`: compile the fused
kernel extension into its cache ahead of time (``bloomtrain.kernels.build.load``), instead of on first use; or, with
``--targets``, compile every GPU kernel for those architectures on this machine (no GPU needed) and print what each
needs per thread block.

With ``--targets`` nothing is built into the cache: every tile of every Triton launch plan (the flash attention's,
bloomtrain.kernels.flash_plans) and every csrc/ CUDA kernel (where nvcc is installed) is compiled for each target,
and one row per kernel, head dim and target gives its registers per thread, the bytes it spills to local memory and
its shared memory against the target's limit (bloomtrain.kernels.resources). Exit 1 when any of them spills or does
not fit, 0 when all do.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field, field_validator

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError


class KernelBuildConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cuda: bool | None = Field(default=None, description="build the CUDA kernels too (default: when a CUDA toolkit "
                                                        "and GPU are there)",
                              json_schema_extra=cli_option("--cuda", off=["--cpu-only"]))
    verbose: bool = Field(default=False, description="show the compiler commands and output")
    targets: str | None = Field(default=None, description="compile every GPU kernel for these architectures "
                                "(comma-separated: sm_80, sm_86, sm_89, sm_90) without a GPU and print each one's "
                                "registers, spills and shared memory; exit 1 if one spills or does not fit")
    head_dims: str = Field(default="64,128,256", description="with --targets: the head dims whose flash-attention "
                                                             "plans are compiled (comma-separated)")
    first_only: bool = Field(default=False, description="with --targets: only each kernel's first-choice tiles, not "
                                                        "the fallbacks of its plan")

    @field_validator("targets")
    @classmethod
    def _known_targets(cls, value: str | None) -> str | None:
        if value is not None:
            from bloomtrain.kernels.resources import parse_targets  # noqa: PLC0415

            parse_targets(value)
        return value

    @field_validator("head_dims")
    @classmethod
    def _head_dims(cls, value: str) -> str:
        dims = [d.strip() for d in value.split(",") if d.strip()]
        if not dims or not all(d.isdigit() and 1 <= int(d) <= 256 for d in dims):
            raise ValueError(f"expected comma-separated head dims in [1, 256], got {value!r}")
        return ",".join(dims)


def parser() -> ConfigParser[KernelBuildConfig]:
    return ConfigParser(KernelBuildConfig, "bloomtrain build-kernels", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
    if config.targets is not None:
        return check_targets(config)
    from bloomtrain.kernels.build import KernelBuildError, build_key, cache_root, cuda_buildable, load  # noqa: PLC0415

    with_cuda = cuda_buildable() if config.cuda is None else config.cuda
    started = time.perf_counter()
    try:
        load(with_cuda, verbose=config.verbose)
    except KernelBuildError as exc:
        raise BloomstackError(str(exc)) from exc
    kind = "CPU+CUDA" if with_cuda else "CPU"
    print(f"built {kind} kernels in {cache_root() / build_key(with_cuda)} ({time.perf_counter() - started:.1f}s)")
    return 0


def check_targets(config: KernelBuildConfig) -> int:
    """``--targets``: the resource table of every kernel on every target; 1 when one spills or does not fit."""
    from bloomtrain.kernels import resources  # noqa: PLC0415

    assert config.targets is not None
    targets = resources.parse_targets(config.targets)
    head_dims = [int(d) for d in config.head_dims.split(",")]
    compiler = resources.nvcc()
    started = time.perf_counter()
    try:
        usages = resources.check(targets, head_dims, cuda=compiler is not None, first_only=config.first_only)
    except ImportError as exc:
        raise BloomstackError(f"build-kernels --targets: triton is not importable ({exc}); pip install triton "
                              "(the train extra) to compile the GPU kernels") from exc
    for line in resources.table(usages):
        print(line)
    failed = [u for u in usages if not u.passed]
    where = ", ".join(t.name for t in targets)
    cuda = "" if compiler else "; nvcc not found (PATH, /usr/local/cuda*/bin): the csrc/ CUDA kernels were not checked"
    print(f"{len(usages)} kernel builds for {where} in {time.perf_counter() - started:.0f} s{cuda}: "
          + (f"{len(failed)} spill or do not fit" if failed else "none spills, all fit"))
    return 1 if failed else 0
