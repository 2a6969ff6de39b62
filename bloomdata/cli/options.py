"""Command-line flags generated from a pydantic model, so that no option is declared twice.

``ConfigParser(Model, prog=...)`` walks the model's fields and adds one argparse option per field:

- ``out_dir`` -> ``--out-dir``; ``cli_option("--out")`` on the field replaces the name (aliases: more flags);
- ``bool`` -> ``--x/--no-x`` (``cli_option(off=["--quiet"])`` adds more flags that set False);
- ``Literal[...]`` and enums -> ``choices``; ``list[str]`` -> a repeatable flag; a fixed ``tuple`` -> ``nargs=N``;
- ``dict[str, V]`` -> a repeatable ``NAME=VALUE`` flag; ``float | dict[str, float]`` -> ``W`` or
  ``NAME=W ...`` (one value for every name, or one per name);
- ``list[Model]`` (``sources``) -> a repeatable flag whose every value is one item in its string form
  (the item model parses it, e.g. ``SourceConfig`` takes ``[LANG=]PATH``), and the item model's other fields
  become flags that apply to every item (``--text-field``, ``--format``, ``--lang-field``);
- a nested model -> dotted flags (``--optim.lr``) with ``nested=True`` (the trainer), else only YAML sets it;
- help is the field's description with its default; ``cli_option(positional=True)`` makes an argument.

Every flag's default is ``argparse.SUPPRESS``: only flags given on the command line become values, which
``bloomdata.config_loader.load_config`` puts above the ``--config`` file and below ``key=value`` overrides, and
pydantic converts (so a bad value is reported like a bad YAML value, naming the flag). Values are passed
as the strings typed; the model's own validators parse units (``50MB``, ``350e9``).

Hand-declared options are only those that are not config: ``--config FILE``, ``key=value`` overrides and
output switches (``--json``); ``HAND_DECLARED`` lists them and a test holds every other option
to a model field.
"""

from __future__ import annotations

import argparse
import enum
import re
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from bloomdata.config_loader import FlagValues, Key, config_yaml, fields_of, load_config
from bloomdata.errors import BloomstackError

M = TypeVar("M", bound=BaseModel)

HAND_DECLARED = frozenset({"-h", "--help", "--config", "--preset", "--json", "--print-config", "--dry-run"})


@dataclass
class Option:
    """One generated option: which model key it sets and how its strings become a value."""

    key: Key  # the field it sets: ("out_dir",), ("optim", "lr")
    flags: list[str]  # option strings; [] for a positional argument
    dest: str
    kind: str  # value | bool | list | pairs | number_or_pairs | items | shared
    item_model: type[BaseModel] | None = None  # kind=items: the model each value is parsed by
    items_key: Key = ()  # kind=shared: the list field whose items this flag applies to
    off: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.flags[0] if self.flags else self.dest.removeprefix("field:").upper()


def _meta(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    cli = extra.get("cli") if isinstance(extra, dict) else None
    return dict(cli) if isinstance(cli, dict) else {}


def _strip(tp: Any) -> tuple[Any, bool]:
    """(the type without Annotated and None, whether None was allowed)."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) < len(typing.get_args(tp)):
            inner = members[0] if len(members) == 1 else typing.Union[tuple(members)]  # noqa: UP007
            return _strip(inner)[0], True
    return tp, False


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _default_text(info: FieldInfo) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return f" (required{', ' + _meta(info)['required'] if _meta(info).get('required') else ''})"
    default = info.get_default(call_default_factory=True, validated_data={})
    if default is None or default == [] or default == {} or default == ():
        return ""
    if isinstance(default, bool):
        return f" (default: {'on' if default else 'off'})"
    if isinstance(default, BaseModel):
        return ""
    return f" (default: {default})"


def _help(info: FieldInfo) -> str:
    text = (info.description or "").strip() + _default_text(info)
    return text.strip().replace("%", "%%") or "(no description)"


def add_options(parser: argparse.ArgumentParser, model: type[BaseModel], *, nested: bool = False,
                prefix: Key = (), shared_of: Key | None = None) -> list[Option]:
    """Add one option per field of ``model`` to ``parser``; returns what each option sets."""
    options: list[Option] = []
    for name, info in fields_of(model).items():
        meta = _meta(info)
        if meta.get("skip"):
            continue
        key = (*prefix, name)
        tp, _ = _strip(info.annotation)
        dotted = ".".join(map(str, key)) if shared_of is None else name
        flags = meta.get("flags") or [f"--{dotted.replace('_', '-')}"]
        dest = "field:" + ".".join(map(str, key))
        metavar = meta.get("metavar") or name.upper()
        args = typing.get_args(tp)
        if meta.get("positional"):
            many = typing.get_origin(tp) in (list, tuple)
            nargs = "*" if many else None if info.is_required() else "?"
            parser.add_argument(dest, nargs=nargs, help=_help(info), metavar=metavar, default=argparse.SUPPRESS)
            options.append(Option(key, [], dest, "list" if many else "value"))
            continue
        kw: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS, "help": _help(info)}
        if tp is bool:
            options.append(_switch(parser, Option(key, flags, dest, "bool" if shared_of is None else "shared",
                                                  items_key=shared_of or (), off=list(meta.get("off", []))), kw))
        elif _is_model(tp):
            if nested and shared_of is None:
                options += add_options(parser, tp, nested=True, prefix=key)
        elif typing.get_origin(tp) is list and args and _is_model(args[0]):
            parser.add_argument(*flags, action="append", metavar=metavar, **kw)
            options.append(Option(key, flags, dest, "items", item_model=args[0]))
            options += add_options(parser, args[0], prefix=key, shared_of=key)
        elif (kind := _value_kind(tp, kw, meta.get("metavar"), metavar)) is not None:
            parser.add_argument(*flags, **kw)
            kind = "shared" if kind == "value" and shared_of is not None else kind
            options.append(Option(key, flags, dest, kind, items_key=shared_of or ()))
    return options


def _switch(parser: argparse.ArgumentParser, option: Option, kw: dict[str, Any]) -> Option:
    """A bool field: ``--flag/--no-flag``, plus its extra ``off`` spellings."""
    parser.add_argument(*option.flags, action=argparse.BooleanOptionalAction, **kw)
    for off in option.off:
        parser.add_argument(off, dest=option.dest, action="store_false", default=argparse.SUPPRESS,
                            help=f"same as --no-{option.flags[0].removeprefix('--')}")
    return option


def _value_kind(tp: Any, kw: dict[str, Any], metavar: str | None, default_metavar: str) -> str | None:
    """How a value field's strings parse (sets argparse's action, nargs, choices and metavar in ``kw``):
    value, list, pairs or number_or_pairs; None for a section set in YAML only."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    kw["metavar"] = metavar or default_metavar
    if origin is Literal or (isinstance(tp, type) and issubclass(tp, enum.Enum)):
        kw["choices"] = [str(a) for a in args] if origin is Literal else [str(m.value) for m in tp]
        kw["metavar"] = metavar or "{" + ",".join(kw["choices"]) + "}"
    elif origin in (list, set, frozenset) or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        kw["action"] = "append" if origin is not tuple else "extend"
        if origin is tuple:
            kw["nargs"] = "+"
        return "list"
    elif origin is tuple:
        kw["nargs"] = len(args)
        return "list"
    elif origin is dict:
        kw.update(action="append", metavar=metavar or "NAME=VALUE")
        return "pairs"
    elif origin in (typing.Union, types.UnionType) and any(typing.get_origin(a) is dict for a in args):
        kw.update(action="extend", nargs="+", metavar=metavar or "V|NAME=V")
        return "number_or_pairs"
    elif _is_model_union(tp):
        return None  # sections set in YAML only
    return "value"


def _is_model_union(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and any(_is_model(a) for a in typing.get_args(tp))


def _pairs(option: Option, items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not name or not value:
            raise BloomstackError(f"{option.name} {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


def _item(option: Option, text: str) -> dict[str, Any]:
    """One ``items`` value in the fields its string form sets (``en=x.jsonl`` -> paths, lang)."""
    try:
        assert option.item_model is not None  # an ``items`` option has one
        return option.item_model.model_validate(text).model_dump(exclude_unset=True)
    except ValidationError as exc:
        raise BloomstackError(f"{option.name} {text!r}: {exc.errors()[0]['msg']}") from None


def values_from(namespace: argparse.Namespace, options: Sequence[Option]) -> tuple[dict, dict[Key, str]]:
    """The nested dict of the options given on the command line, and the flag that set each key."""
    given = vars(namespace)
    values: dict = {}
    flags: dict[Key, str] = {}
    shared: dict[Key, dict[str, Any]] = {}
    for option in options:
        if option.dest not in given:
            continue
        raw = given[option.dest]
        if option.kind == "shared":
            shared.setdefault(option.items_key, {})[str(option.key[-1])] = (raw, option.name)
            continue
        if option.kind == "pairs":
            value: Any = _pairs(option, raw)
        elif option.kind == "number_or_pairs":
            value = raw[0] if len(raw) == 1 and "=" not in raw[0] else _pairs(option, raw)
        elif option.kind == "items":
            value = [_item(option, text) for text in raw]
        else:
            value = raw
        node = values
        for part in option.key[:-1]:
            node = node.setdefault(part, {})
        node[option.key[-1]] = value
        flags[option.key] = option.name
    for items_key, fields in shared.items():
        owner = next(o for o in options if o.key == items_key and o.kind == "items")
        if items_key not in flags:
            names = [flag for _, flag in fields.values()]
            raise BloomstackError(f"{', '.join(names)} {'applies' if len(names) == 1 else 'apply'} to each "
                                  f"{owner.name}; give {owner.name} too (in a config file, set {', '.join(fields)} "
                                  "on each item instead)")
        node = values
        for part in items_key[:-1]:
            node = node[part]
        items = node[items_key[-1]]
        # a value the item's string form sets (LANG= of LANG=PATH) wins over the flag for every item
        node[items_key[-1]] = [{**{k: v for k, (v, _) in fields.items()}, **item} for item in items]
        for i in range(len(items)):
            flags.update({(*items_key, i, k): flag for k, (_, flag) in fields.items()})
    return values, flags


@dataclass(frozen=True)
class Sources:
    """Where a command's config may come from besides its generated flags (each a hand-declared option)."""

    file: bool = True  # --config FILE
    file_required: bool = False
    overrides: bool = False  # KEY=VALUE positionals, on top of everything
    override_example: str = ""  # two overrides of this command's own keys, for the help
    presets: dict[str, Any] = field(default_factory=dict)  # --preset NAME: a shipped config file by name
    dry_run: str = ""  # --dry-run's help: what the command's plan shows ("": the command has no --dry-run)


FLAGS_ONLY = Sources(file=False)


def _shipped(path: Any) -> str:
    """A shipped file's path from its package's folder (``bloomdata/clean/presets/roots.yaml``), the same on every
    machine."""
    parts = Path(path).parts
    return "/".join(parts[parts.index("bloomdata"):]) if "bloomdata" in parts else str(path)


class ConfigParser(Generic[M]):
    """An argparse parser generated from ``model``, plus ``--config FILE`` and ``key=value`` overrides.

    ``parse(argv)`` -> ``(config, namespace)``: the validated model (defaults <- file <- flags <- overrides,
    through ``bloomdata.config_loader.load_config``) and the namespace, for hand-declared output switches.
    """

    def __init__(self, model: type[M], prog: str, description: str | None = None, *, sources: Sources = Sources(),
                 nested: bool = False):
        self.model = model
        self.parser = argparse.ArgumentParser(prog=prog, description=(description or "").replace("``", "`"),
                                              formatter_class=argparse.RawDescriptionHelpFormatter)
        self.options = add_options(self.parser, model, nested=nested)
        self.hand_declared: list[str] = []
        if sources.file:
            self.add_argument("--config", metavar="FILE", required=sources.file_required,
                              help=f"YAML file holding a {model.__name__} (flags and overrides go on top of it)")
        self.presets = sources.presets
        if self.presets:
            self.add_argument("--preset", choices=sorted(self.presets),
                              help="a shipped config file by name, in place of --config (" + ", ".join(
                                  f"{name}: {_shipped(path)}" for name, path in sorted(self.presets.items())) + ")")
        if sources.file:
            self.add_argument("--print-config", action="store_true",
                              help="print the resolved config (defaults <- --config <- flags <- overrides) as YAML "
                                   "and exit; --config takes that YAML back")
        if sources.dry_run:
            self.add_argument("--dry-run", action="store_true",
                              help=f"print the plan ({sources.dry_run}) and exit, with nothing written")
        if sources.overrides:
            self.parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                                     help="dotted overrides on top of everything, values parsed as YAML"
                                          + (f" (e.g. {sources.override_example})" if sources.override_example
                                             else ""))

    def add_argument(self, *flags: str, **kwargs: Any) -> None:
        """A hand-declared option that is not config (``--json``); must be in ``HAND_DECLARED``."""
        unknown = [f for f in flags if f.startswith("-") and f not in HAND_DECLARED]
        if unknown:
            raise ValueError(f"{unknown}: only {sorted(HAND_DECLARED)} may be declared by hand; make it a "
                             "model field instead")
        self.hand_declared += list(flags)
        self.parser.add_argument(*flags, **kwargs)

    def flag_of(self, key: Key) -> str | None:
        return next((o.name for o in self.options if o.key == key), None)

    def message(self, exc: BloomstackError) -> str:
        """``exc``'s line with the config keys it names (``exc.keys``) written as this command's flags: the one
        mapping from a library error's keys to a CLI's flags, from the generated options. A key is replaced as a
        whole word: not inside a path, a dotted name or a `quoted command`."""
        text = str(exc)
        for key in exc.keys:
            flag = self.flag_of(tuple(key.split(".")))
            if flag and flag.startswith("-"):
                text = re.sub(rf"(?<![\w./`-]){re.escape(key)}(?![\w/`-]|\.\w)", flag.replace("\\", r"\\"), text)
        return text

    def parse(self, argv: Sequence[str]) -> tuple[M, argparse.Namespace]:
        # intermixed: options and KEY=VALUE overrides in any order (`--nodes 2 a=1 --time 1:00:00 b=2`)
        args = self.parser.parse_intermixed_args(list(argv))
        values, flags = values_from(args, self.options)
        path = getattr(args, "config", None)
        preset = getattr(args, "preset", None)
        if preset is not None:
            if path is not None:
                raise BloomstackError(f"--preset {preset} and --config {path}: give one (a preset is a config file)")
            path = self.presets[preset]
        given = FlagValues(values, flags=flags, flag_of=self.flag_of)
        config = load_config(self.model, path, values=given, overrides=getattr(args, "overrides", None) or (),
                             origin="command line")
        if getattr(args, "print_config", False):
            print(config_yaml(config), end="")
            raise SystemExit(0)
        return config, args
