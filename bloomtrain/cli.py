"""`bloomtrain` command line: one dispatcher, one module per subcommand.

Each subcommand lives in the module that does the work and exposes ``main(argv) -> int``. Modules
are imported lazily: ``bloomtrain --help`` does not import torch or deepspeed.
"""

from __future__ import annotations

import sys

from bloomdata.cli import dispatch

# subcommand -> (module exposing main(argv), one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "export": ("bloomtrain.export", "write a transformers BloomForCausalLM directory from a checkpoint"),
    "import": ("bloomtrain.hf_import", "load a transformers BLOOM checkpoint for continued pretraining"),
    "generate": ("bloomtrain.generate", "greedy or top-k/top-p sampling from a checkpoint or HF model"),
    "build-kernels": ("bloomtrain.kernels.build", "build the fused C++/CUDA kernels ahead of time"),
    "train": ("bloomtrain.train", "train (under torchrun or the DeepSpeed launcher)"),
    "slurm": ("bloomtrain.slurm", "write an sbatch script for a multi-node run"),
}


def main(argv: list[str] | None = None) -> int:
    return dispatch("bloomtrain", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
