"""`bloomtrain` command line: one dispatcher, one module per subcommand.

Each subcommand lives in the module that does the work and exposes ``main(argv) -> int``. Modules
are imported lazily: ``bloomtrain --help`` does not import torch or deepspeed.
"""

from __future__ import annotations

import importlib
import sys

from bloomdata.errors import BloomDataError

# subcommand -> (module exposing main(argv), one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "export": ("bloomtrain.export", "write a transformers BloomForCausalLM directory from a checkpoint"),
    "import": ("bloomtrain.hf_import", "load a transformers BLOOM checkpoint for continued pretraining"),
    "generate": ("bloomtrain.generate", "greedy or top-k/top-p sampling from a checkpoint or HF model"),
    "build-kernels": ("bloomtrain.kernels.build", "build the fused C++/CUDA kernels ahead of time"),
    "train": ("bloomtrain.train", "train (under torchrun or the DeepSpeed launcher)"),
    "slurm": ("bloomtrain.slurm", "write an sbatch script for a multi-node run"),
}


def _usage() -> str:
    lines = ["usage: bloomtrain COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<14} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `bloomtrain COMMAND --help` for the options of one command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"bloomtrain: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(COMMANDS[name][0])
    except ModuleNotFoundError as exc:
        print(f"bloomtrain {name}: not available in this install ({exc})", file=sys.stderr)
        return 2
    try:
        return int(module.main(rest) or 0)
    except BloomDataError as exc:
        print(f"bloomtrain {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bloomtrain {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
