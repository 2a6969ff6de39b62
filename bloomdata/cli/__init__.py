"""`bloomdata` command line: one dispatcher, one module per subcommand.

Each subcommand is a thin module here exposing ``parser()`` (flags generated from the command's pydantic
model by ``bloomdata.cli.options``) and ``main(argv) -> int``; the work stays in the library. This file only
routes (litgpt's single-dispatcher idea). Modules are imported lazily so that ``bloomdata --help`` stays
fast and a subcommand never pays for another's imports (dask, matplotlib).
"""

from __future__ import annotations

import importlib
import sys

from bloomdata.errors import BloomstackError

# subcommand -> (module exposing main(argv), one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "train-tokenizer": ("bloomdata.cli.train_tokenizer", "train a BLOOM-style byte-level BPE tokenizer"),
    "fertility": ("bloomdata.cli.fertility", "tokens per word and per character, per language"),
    "clean": ("bloomdata.cli.clean", "filter, deduplicate and redact corpora in parallel, before tokenization"),
    "build": ("bloomdata.cli.build", "tokenize corpora in parallel into Megatron .bin/.idx"),
    "megatron-preprocess": ("bloomdata.cli.megatron_preprocess",
                            "Megatron-LM's tools/preprocess_data.py command line, on the build"),
    "inspect": ("bloomdata.cli.inspect", "counts, dtype, length histogram and first documents of a dataset"),
    "blend": ("bloomdata.cli.blend", "tune per-language blend weights (alpha sampling) for a token budget"),
}


def _usage(prog: str, commands: dict[str, tuple[str, str]]) -> str:
    width = max(len(name) for name in commands) + 2
    lines = [f"usage: {prog} COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<{width}} {help_}" for name, (_, help_) in commands.items()]
    lines += ["", f"Run `{prog} COMMAND --help` for the options of one command, `{prog} --version` for the version."]
    return "\n".join(lines)


def dispatch(prog: str, commands: dict[str, tuple[str, str]], argv: list[str] | None) -> int:
    """Route ``argv`` to ``commands[argv[0]]``'s ``main(rest)``; a BloomstackError becomes one line, exit 2.

    Shared by the ``bloomdata`` and ``bloomtrain`` entry points.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(prog, commands))
        return 0
    if argv[0] in ("-V", "--version"):
        from bloomdata.version import version_line  # noqa: PLC0415 - runs git

        print(version_line(prog))
        return 0
    name, rest = argv[0], argv[1:]
    if name not in commands:
        print(f"{prog}: unknown command {name!r}\n\n{_usage(prog, commands)}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(commands[name][0])
    except ModuleNotFoundError as exc:  # an optional extra (torch, deepspeed) is not installed
        print(f"{prog} {name}: not available in this install ({exc})", file=sys.stderr)
        return 2
    try:
        return int(module.main(rest) or 0)
    except BloomstackError as exc:
        print(f"{prog} {name}: error: {_as_flags(module, exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog} {name}: interrupted", file=sys.stderr)
        return 130


def _as_flags(module: object, exc: BloomstackError) -> str:
    """The error's line with the config keys it names as the subcommand's flags (its ``parser()``)."""
    from bloomdata.cli.options import ConfigParser  # noqa: PLC0415 - only on an error

    make_parser = getattr(module, "parser", None)
    parser = make_parser() if exc.keys and callable(make_parser) else None
    return parser.message(exc) if isinstance(parser, ConfigParser) else str(exc)


def main(argv: list[str] | None = None) -> int:
    return dispatch("bloomdata", COMMANDS, argv)


if __name__ == "__main__":
    sys.exit(main())
