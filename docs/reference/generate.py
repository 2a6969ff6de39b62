"""Write docs/reference/: one page per command (its ``--help``), one per config model (every key with its type,
default and description), the schema of ``blend.yaml`` and the parameters of every Prefect flow.

Everything is read from the code (the commands' generated parsers, the pydantic models, the flows' signatures), so
the pages cannot say what the code does not. ``make reference`` runs this; ``tests/test_reference_docs.py`` fails
when a page differs from what this would write.

    python docs/reference/generate.py [--check]
"""

from __future__ import annotations

import argparse
import enum
import importlib
import inspect
import os
import pkgutil
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# the dispatchers whose commands get a page: (program, module holding COMMANDS)
PROGRAMS = [("bloomdata", "bloomdata.cli"), ("bloomtrain", "bloomtrain.cli")]
HELP_COLUMNS = "100"  # argparse wraps --help at $COLUMNS: fixed, so the pages are the same on every terminal


# --- types, defaults, rows --------------------------------------------------------------------------------


def type_text(tp: object) -> str:
    """A field's annotation as a reader writes it: ``int | None``, ``list[SourceConfig]``, ``'a' | 'b'``."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return type_text(args[0])
    if origin is typing.Literal:
        return " | ".join(repr(a.value if isinstance(a, enum.Enum) else a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(type_text(a) for a in args)}]"
    if tp is type(None):
        return "None"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " | ".join(repr(m.value) for m in tp)
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def value_text(value: object) -> str:
    """A default as the pages show it: the repository's own path as ``<repo>``, models by name (their page lists
    their fields' defaults), so that a page is the same on every machine and stays one line."""
    if isinstance(value, BaseModel):
        return f"a {type(value).__name__} with its defaults"
    if isinstance(value, list | tuple) and value and isinstance(value[0], BaseModel):
        return f"{len(value)} x {type(value[0]).__name__} (shipped defaults)"
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, Path):
        value = str(value)
    return "`" + repr(value).replace(str(ROOT), "<repo>").replace("|", "\\|") + "`"


def default_text(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    return value_text(info.get_default(call_default_factory=True, validated_data={}))


def _nested(tp: object) -> tuple[type[BaseModel] | None, str]:
    """The model a field holds (itself, a list of it, or a dict of it) and the key suffix that says which."""
    for arg in (tp, *typing.get_args(tp)):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg, ""
        origin, inner = typing.get_origin(arg), typing.get_args(arg)
        if origin is list and inner and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
            return inner[0], "[]"
        if origin is dict and len(inner) == 2 and isinstance(inner[1], type) and issubclass(inner[1], BaseModel):
            return inner[1], ".NAME"
    return None, ""


def rows(model: type[BaseModel], prefix: str = "", seen: tuple[type, ...] = ()) -> list[tuple[str, str, str, str]]:
    """(dotted key, type, default, description) of every field of ``model``, nested models' fields inline."""
    out = []
    for name, info in model.model_fields.items():
        if info.exclude and info.default is PydanticUndefined:
            continue
        key = prefix + (info.alias or name)
        description = " ".join((info.description or "").split()).replace("|", "\\|")
        out.append((key, type_text(info.annotation).replace("|", "\\|"), default_text(info), description))
        inner, suffix = _nested(info.annotation)
        if inner is not None and inner not in seen:
            out += rows(inner, f"{key}{suffix}.", (*seen, model))
    return out


def model_page(model: type[BaseModel], used_by: list[str]) -> str:
    doc = inspect.cleandoc(model.__doc__ or "").split("\n\n")[0].replace("\n", " ")
    lines = [f"# {model.__name__}", "", f"`{model.__module__}.{model.__name__}`" + (f": {doc}" if doc else ""), ""]
    if used_by:
        lines += ["Used by: " + ", ".join(used_by) + ".", ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    lines += [f"| `{k}` | {t} | {d} | {s} |" for k, t, d, s in rows(model)]
    return "\n".join(lines) + "\n"


# --- the pages ----------------------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return text.replace(" ", "-").replace(".", "-")


def _help_text(parser: object) -> str:
    parser = getattr(parser, "parser", parser)  # a ConfigParser holds its argparse parser
    assert isinstance(parser, argparse.ArgumentParser)
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS  # read by argparse's formatter when it is made; put back after
    try:
        return parser.format_help().rstrip()
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def command_pages(models: dict[type[BaseModel], list[str]]) -> dict[str, str]:
    """``commands/<program>-<command>.md``: the command's one-line summary, its --help and its config model.

    Adds each command's model to ``models`` (model -> the commands and flows that take it)."""
    pages = {}
    for program, module_name in PROGRAMS:
        for command, (module, summary) in importlib.import_module(module_name).COMMANDS.items():
            name = f"{program} {command}"
            parser = importlib.import_module(module).parser()
            model = getattr(parser, "model", None)
            lines = [f"# {name}", "", summary[0].upper() + summary[1:] + ".", ""]
            if model is not None:
                models.setdefault(model, []).append(f"`{name}`")
                lines += [f"Config: [{model.__name__}](../config/{model.__name__}.md) (`--config FILE` takes it "
                          "as YAML; every key is also a flag or a `KEY=VALUE` override where the help says so).", ""]
            lines += ["```text", _help_text(parser), "```"]
            pages[f"commands/{_slug(name)}.md"] = "\n".join(lines) + "\n"
    return pages


def _flows() -> list[object]:
    """Every Prefect flow defined in the ``flows`` package, by name."""
    from prefect import Flow  # noqa: PLC0415 - only the reference needs Prefect

    import flows  # noqa: PLC0415

    found = {}
    for info in pkgutil.iter_modules(flows.__path__):
        module = importlib.import_module(f"flows.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Flow) and value.fn.__module__ == module.__name__:
                found[value.name] = value
    return [found[name] for name in sorted(found)]


def flows_page(models: dict[type[BaseModel], list[str]]) -> str:
    """``flows.md``: each flow's parameters (name, type, default) and the model pages they point to."""
    lines = ["# Prefect flows", "", "Every flow in `flows/`, with the parameters a deployment or `flow(...)` call "
             "takes. A parameter whose type is a config model takes that model's keys (its page lists them).", ""]
    for flow in _flows():
        doc = inspect.cleandoc(flow.fn.__doc__ or "").split("\n\n")[0].replace("\n", " ")
        lines += [f"## {flow.name}", "", f"`{flow.fn.__module__}.{flow.fn.__name__}`: {doc}", "",
                  "| parameter | type | default |", "|---|---|---|"]
        hints = typing.get_type_hints(flow.fn)
        for name, param in inspect.signature(flow.fn).parameters.items():
            tp = hints.get(name, param.annotation)
            model, _ = _nested(tp)
            if model is not None:
                models.setdefault(model, []).append(f"flow `{flow.name}`")
            shown = f"[{type_text(tp)}](config/{model.__name__}.md)" if model is not None else type_text(tp)
            default = "required" if param.default is inspect.Parameter.empty else value_text(param.default)
            lines.append(f"| `{name}` | {shown.replace('|', chr(92) + '|')} | {default} |")
        lines.append("")
    return "\n".join(lines)


def blend_page() -> str:
    from bloomdata.blend.spec import BlendSpec  # noqa: PLC0415

    return model_page(BlendSpec, ["`bloomdata blend` (writes it)", "`bloomtrain train` (`data.blend`)",
                                  "the flows' blend and train stages"]).replace(
        "# BlendSpec", "# blend.yaml (BlendSpec)", 1)


def index_page(pages: dict[str, str]) -> str:
    lines = ["# Reference", "", "Generated from the code by `make reference` (docs/reference/generate.py); "
             "tests/test_reference_docs.py fails when a page is stale. The other pages in docs/ say how; these "
             "say what each command, key and parameter is.", ""]
    for title, folder in (("Commands", "commands/"), ("Config models", "config/")):
        lines += [f"## {title}", ""]
        lines += [f"- [{p.removeprefix(folder).removesuffix('.md')}]({p})" for p in sorted(pages)
                  if p.startswith(folder)]
        lines.append("")
    lines += ["## Files and flows", "", "- [blend.yaml](blend-yaml.md)", "- [Prefect flows](flows.md)", ""]
    return "\n".join(lines)


def pages() -> dict[str, str]:
    """Every page's path under docs/reference/ -> its text."""
    models: dict[type[BaseModel], list[str]] = {}
    out = command_pages(models)
    out["flows.md"] = flows_page(models)
    out["blend-yaml.md"] = blend_page()
    for model, used_by in models.items():
        out[f"config/{model.__name__}.md"] = model_page(model, sorted(set(used_by)))
    out["README.md"] = index_page(out)
    return out


def stale(root: Path = HERE) -> list[str]:
    """The pages under ``root`` that differ from what ``pages()`` gives, or that it would not write."""
    want = pages()
    have = {str(p.relative_to(root)) for p in root.rglob("*.md")}
    wrong = [p for p, text in want.items() if not (root / p).is_file() or (root / p).read_text() != text]
    return sorted(wrong + [p for p in have - set(want)])


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--check", action="store_true", help="write nothing; exit 1 listing the stale pages")
    check = args.parse_args(argv).check
    if check:
        bad = stale()
        print("\n".join(f"docs/reference/{p}: stale; run `make reference`" for p in bad) or "up to date")
        return 1 if bad else 0
    for page in HERE.rglob("*.md"):
        page.unlink()
    written = pages()
    for path, text in written.items():
        (HERE / path).parent.mkdir(parents=True, exist_ok=True)
        (HERE / path).write_text(text)
    print(f"docs/reference/: {len(written)} pages")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
