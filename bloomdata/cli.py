"""`bloomdata` command line: one dispatcher, one module per subcommand.

Each subcommand lives in the module that does the work and exposes ``main(argv) -> int``; this file
only routes (litgpt's single-dispatcher idea). Modules are imported lazily so that ``bloomdata --help``
stays fast and a subcommand never pays for another's imports (dask, matplotlib).
"""

from __future__ import annotations

import importlib
import sys

from bloomdata.errors import BloomDataError

# subcommand -> (module exposing main(argv), one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train-tokenizer": ("bloomdata.tokenizer_cli", "train a BLOOM-style byte-level BPE tokenizer"),
    "fertility": ("bloomdata.fertility", "tokens per word and per character, per language"),
    "build": ("bloomdata.build_cli", "tokenize corpora in parallel into Megatron .bin/.idx"),
    "inspect": ("bloomdata.inspect", "counts, dtype, length histogram and first documents of a dataset"),
    "blend": ("bloomdata.blend_cli", "tune per-language blend weights (alpha sampling) for a token budget"),
}


def _usage() -> str:
    lines = ["usage: bloomdata COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<16} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines += ["", "Run `bloomdata COMMAND --help` for the options of one command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"bloomdata: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    try:
        return int(module.main(rest) or 0)
    except BloomDataError as exc:
        print(f"bloomdata {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"bloomdata {name}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
