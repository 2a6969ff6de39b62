"""`bloomtrain` command line: one dispatcher, one module per subcommand (``bloomtrain/cli/<command>.py``).

Each subcommand module exposes ``parser()`` (flags generated from its pydantic model by
``bloomdata.cli.options``) and ``main(argv) -> int``; the work itself stays in the library modules
(``bloomtrain.train``, ``bloomtrain.export`` ...). Modules are imported lazily: ``bloomtrain --help`` does
not import torch or deepspeed. ``python -m bloomtrain.cli train ...`` is what the launchers run on each rank.
"""

from __future__ import annotations

import sys

from bloomdata.cli import dispatch

# subcommand -> (module exposing main(argv), one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "export": ("bloomtrain.cli.export", "write a transformers BloomForCausalLM directory (and its model card) from a "
                                        "checkpoint"),
    "verify": ("bloomtrain.cli.verify", "check a checkpoint folder against the digests its saves recorded (exit 1: "
                                        "damaged)"),
    "model-card": ("bloomtrain.cli.model_card", "(re)build a model card from an export's or a checkpoint's records"),
    "import": ("bloomtrain.cli.import_hf", "load a transformers BLOOM checkpoint for continued pretraining"),
    "generate": ("bloomtrain.cli.generate", "greedy or top-k/top-p sampling from a checkpoint or HF model"),
    "evaluate": ("bloomtrain.cli.evaluate", "bits per byte per language and lm-eval tasks of causal LMs"),
    "build-kernels": ("bloomtrain.cli.build_kernels", "build the fused C++/CUDA kernels ahead of time"),
    "train": ("bloomtrain.cli.train", "train (under torchrun or the DeepSpeed launcher)"),
    "slurm": ("bloomtrain.cli.slurm", "write an sbatch script for a multi-node run"),
    "mixture-search": ("bloomtrain.cli.mixture_search", "find blend weights with proxy models (RegMix)"),
}


def torch_dtype(name: str | None):
    """'bfloat16' -> torch.bfloat16 (None stays None): the dtype names the models' ``dtype`` fields allow."""
    import torch  # noqa: PLC0415 - only the commands that load weights pay for torch

    return None if name is None else getattr(torch, name)


def main(argv: list[str] | None = None) -> int:
    return dispatch("bloomtrain", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
