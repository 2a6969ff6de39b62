"""`bloomtrain build-kernels [--cuda | --cpu-only] [--verbose]`: compile the fused kernel extension into its
cache ahead of time (``bloomtrain.kernels.build.load``), instead of on first use."""

from __future__ import annotations

import time

from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.config_loader import cli_option
from bloomdata.errors import BloomstackError


class KernelBuildConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cuda: bool | None = Field(default=None, description="build the CUDA kernels too (default: when a CUDA toolkit "
                                                        "and GPU are there)",
                              json_schema_extra=cli_option("--cuda", off=["--cpu-only"]))
    verbose: bool = Field(default=False, description="show the compiler commands and output")


def parser() -> ConfigParser[KernelBuildConfig]:
    return ConfigParser(KernelBuildConfig, "bloomtrain build-kernels", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)


def main(argv: list[str]) -> int:
    config, _ = parser().parse(argv)
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
