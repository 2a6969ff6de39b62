"""The one config loader: every entry point's pydantic model from defaults, a YAML file, flags and overrides.

Layers, lowest precedence first:

1. the model's defaults, or given defaults (the flows' demo configs);
2. a YAML file (``--config FILE``);
3. values from the generated command-line flags (``bloomdata.cli.options``), or a partial dict from a
   Prefect deployment's parameters;
4. ``a.b=value`` dotlist overrides, values parsed as YAML (``3``, ``1e-4``, ``true``, ``[1, 2]``, ``null``).

Layers 1-3 are deep-merged (``merge``): a nested mapping completes the one below it, except that a mapping
holding a ``preset`` key (``model: {preset: bloom-560m, seq_length: 1024}``) stands for a whole section
and replaces it. Lists replace too (``--input`` replaces the file's sources). An override sets one key.

Every failure is one ``BloomstackError`` line in one format, wherever the bad value came from::

    configs/x.yaml:7: schedule.micro_batch_size: Input should be a valid integer (got 'two'); fix: ...

naming the file and the YAML line of the key (from ``yaml.compose`` node marks), or the flag, or the
override, that set it; the dotted key; pydantic's message; the value found; and a fix built from the
field (its description, the flag that sets it, a close known name for a misspelt key). The trade-off: a
value's origin is found again when an error is formatted, by asking each layer, highest first, whether it
set that key, instead of tagging every value as it is merged. It costs nothing on the success path.
"""

from __future__ import annotations

import copy
import difflib
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from bloomdata.errors import BloomstackError, FieldValueError

M = TypeVar("M", bound=BaseModel)
Key = tuple[str | int, ...]  # a dotted key as a path: ("sources", 0, "paths")
# The help of every command's `dashboard` field (bloomdata.jobs.executor.dask_client serves it; default off)
DASHBOARD = "serve the Dask dashboard of the LocalCluster (:8787, another port when taken) and print its link"


def cli_option(*flags: str, metavar: str | None = None, positional: bool = False, off: Sequence[str] = (),
               skip: bool = False, required: str | None = None) -> dict[str, Any]:
    """A field's command-line form, for ``Field(json_schema_extra=cli_option(...))``.

    ``flags``: the option strings, replacing the generated ``--field-name`` (``"--out"`` for ``out_dir``).
    ``positional``: an argument without a flag. ``off``: extra flags that set a boolean to False
    (``--quiet`` for ``progress``). ``skip``: no flag (set in a YAML file or by an item's string form).
    ``required``: what the help says of a field without a default in place of "(required)", where something
    else can set it (``"unless model.preset sets it"``).
    Read by ``bloomdata.cli.options``; JSON values only, so schemas (Prefect's) stay serialisable.
    """
    spec = {"flags": list(flags), "metavar": metavar, "positional": positional, "off": list(off), "skip": skip,
            "required": required}
    return {"cli": {k: v for k, v in spec.items() if v}}


def fields_of(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """A model's fields, with those declared elsewhere: a model that takes extra keys as fields of other classes
    (the built-in clean steps' parameters in ``bloomdata.clean.settings.Thresholds``) lists them in
    ``run_time_fields()``. Flags, error messages and keys see them as fields."""
    more = getattr(model, "run_time_fields", None)
    return {**model.model_fields, **more()} if more is not None else dict(model.model_fields)


# --- reading YAML ----------------------------------------------------------------------------------------


def read_yaml(path: str | Path) -> tuple[dict, dict[Key, int]]:
    """The top-level mapping of a YAML file and the 1-based line of every key in it (list items too)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise BloomstackError(f"{path}: cannot read config file: {exc.strerror or exc}; check the path") from None
    except UnicodeDecodeError as exc:
        raise BloomstackError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8") from None
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f":{mark.line + 1}" if mark is not None else ""
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        raise BloomstackError(f"{path}{line}: invalid YAML: {what}; fix the syntax there") from None
    except yaml.YAMLError as exc:
        raise BloomstackError(f"{path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        return {}, {}
    if not isinstance(data, dict):
        raise BloomstackError(f"{path}:1: expected a mapping of config fields at the top level, got a "
                              f"{type(data).__name__}; write `key: value` lines")
    lines: dict[Key, int] = {}
    _key_lines(node, (), lines)
    return data, lines


def _key_lines(node: yaml.Node | None, prefix: Key, out: dict[Key, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
                out[(*prefix, key_node.value)] = key_node.start_mark.line + 1
                _key_lines(value_node, (*prefix, key_node.value), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[(*prefix, i)] = item.start_mark.line + 1
            _key_lines(item, (*prefix, i), out)


# --- merging ---------------------------------------------------------------------------------------------


def merge(base: Mapping, over: Mapping) -> dict:
    """``over`` on top of ``base``, recursively; a mapping holding ``preset`` replaces, lists replace."""
    out = dict(base)
    for key, value in over.items():
        nested = isinstance(value, Mapping) and isinstance(base.get(key), Mapping) and "preset" not in value
        out[key] = merge(base[key], value) if nested else value
    return out


def complete(defaults: BaseModel, value: object) -> object:
    """A partial dict (a Prefect UI or deployment parameter) completed by ``defaults``; for a
    ``field_validator(mode="before")``: ``{"schedule": {"train_iters": 50}}`` is the defaults with 50 iterations."""
    return merge(defaults.model_dump(), value) if isinstance(value, Mapping) else value


def derive(config: M, /, **changes: Any) -> M:
    """``config`` with ``changes``, validated again: ``model_copy(update=...)`` that runs the model's validators
    on the new values (a derived config passes the checks a loaded one does: a misspelt key or a value of the
    wrong type raises instead of being dropped or stored). Nested models stay models (no dump and re-parse); a
    changed nested value may be a model or what the field accepts. The fields set stay those of ``config`` plus
    ``changes``, as with ``model_copy``. Every derived config and record of the project is made here."""
    fields = {name: getattr(config, name) for name in type(config).model_fields}
    unknown = sorted(set(changes) - set(fields))
    if unknown:
        hint = close_name_hint(unknown[0], list(fields))
        raise TypeError(f"{type(config).__name__} has no field {', '.join(unknown)}; {hint}")
    derived = type(config).model_validate({**fields, **(config.model_extra or {}), **changes})
    object.__setattr__(derived, "__pydantic_fields_set__", config.model_fields_set | set(changes))
    return derived


def parse_override(item: str) -> tuple[Key, Any]:
    """``a.b=value`` -> (("a", "b"), value parsed as YAML; empty means None)."""
    key, sep, raw = item.partition("=")
    if not sep or not key.strip():
        raise BloomstackError(f"override {item!r} is not key=value; write it as e.g. optim.lr=1e-4")
    try:
        value = yaml.safe_load(raw) if raw else None
    except yaml.YAMLError as exc:
        raise BloomstackError(f"override {item!r}: the value is not valid YAML ({str(exc).splitlines()[0]}); "
                              "quote it") from None
    return tuple(int(p) if p.isdigit() else p for p in key.strip().split(".")), value


def _set_key(tree: dict, key: Key, value: Any, item: str) -> None:
    node: Any = tree
    for depth, part in enumerate(key[:-1]):
        if isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
            continue
        if not isinstance(node, dict):
            raise BloomstackError(f"override {item}: {'.'.join(map(str, key[:depth]))} is a value, not a section")
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        node = child
    if isinstance(node, list) and isinstance(key[-1], int) and key[-1] < len(node):
        node[key[-1]] = value
    elif isinstance(node, dict):
        node[key[-1]] = value
    else:
        raise BloomstackError(f"override {item}: {'.'.join(map(str, key[:-1]))} is a value, not a section")


# --- loading ---------------------------------------------------------------------------------------------


@dataclass
class _Layer:
    """One source of values, and how to name where a key of it came from."""

    data: Any
    name: str  # "configs/x.yaml", "--workers", "override optim.lr=1", "defaults"
    lines: dict[Key, int] = field(default_factory=dict)  # YAML key lines
    flags: dict[Key, str] = field(default_factory=dict)  # key -> the flag that set it

    def sets(self, loc: Key) -> bool:
        """Whether this layer set ``loc``, a value holding it, or a value inside it."""
        node = self.data
        for part in loc:
            if isinstance(node, Mapping):
                if part not in node:
                    return False
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int):
                if part >= len(node):
                    return False
                node = node[part]
            else:
                return True  # the layer set a scalar or list where loc goes deeper: that value is at fault
        return True

    def where(self, loc: Key) -> str:
        for table, fmt in ((self.lines, lambda v: f"{self.name}:{v}"), (self.flags, str)):
            for n in range(len(loc), 0, -1):
                if loc[:n] in table:
                    return fmt(table[loc[:n]])
            below = [k for k in table if k[: len(loc)] == loc]
            if below:
                return fmt(table[min(below)])
        return self.name


@dataclass(frozen=True)
class FlagValues:
    """Values from a command line's flags, and how to name them: the flag that set each key, and the flag
    that sets any key (for the fix of a missing or wrong value)."""

    values: Mapping
    flags: Mapping[Key, str] = field(default_factory=dict)
    flag_of: Callable[[Key], str | None] | None = None


def load_config(model: type[M], path: str | Path | None = None, *, defaults: BaseModel | Mapping | None = None,
                values: Mapping | FlagValues | None = None, overrides: Sequence[str] = (),
                origin: str = "config") -> M:
    """``model`` from ``defaults`` <- the YAML file at ``path`` <- ``values`` <- ``overrides``, validated.

    ``values``: a partial dict (a deployment's parameters), or ``FlagValues`` from a command line;
    ``origin`` names the values when no file or flag did (``"command line"``, ``"parameters"``).
    """
    given = values if isinstance(values, FlagValues) else FlagValues(values or {})
    layers: list[_Layer] = []
    if defaults is not None:
        data = defaults.model_dump() if isinstance(defaults, BaseModel) else dict(defaults)
        layers.append(_Layer(data, f"{origin} (defaults)"))
    if path is not None:
        data, lines = read_yaml(path)
        layers.append(_Layer(data, str(path), lines=lines))
    if given.values:
        layers.append(_Layer(dict(given.values), origin, flags=dict(given.flags)))
    tree: dict = {}
    for layer in layers:
        tree = merge(tree, layer.data)
    tree = copy.deepcopy(tree)  # the overrides set keys in place: never in the caller's or a layer's dicts
    for item in overrides:
        key, value = parse_override(item)
        _set_key(tree, key, value, item)
        nested: Any = value
        for part in reversed(key):
            nested = {part: nested}
        layers.append(_Layer(nested, f"override {item}"))
    fallback = str(path) if path is not None else origin
    try:
        return model.model_validate(tree)
    except ValidationError as exc:
        raise BloomstackError(format_error(model, exc, layers, fallback, given.flag_of)) from None
    except BloomstackError as exc:  # raised inside a validator of a nested model: name where it was set
        raise BloomstackError(f"{fallback}: {exc}") from None


def config_yaml(config: BaseModel) -> str:
    """``config`` as the YAML that ``load_config`` reads back to an equal model (``--print-config``): every field,
    defaults included, in the model's field order."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=120)


# --- formatting a validation error -------------------------------------------------------------------------


def format_error(model: type[BaseModel], exc: ValidationError, layers: Sequence[_Layer], fallback: str,
                 flag_of: Callable[[Key], str | None] | None = None) -> str:
    """The first error of ``exc`` as one line: where, key, message, value found, fix."""
    errors = exc.errors()
    err = errors[0]
    key, info, siblings = _resolve(model, _field_loc(err, layers), _names_a_key(err))
    others = len({_resolve(model, _field_loc(e, layers), _names_a_key(e))[0] for e in errors} - {key})
    where = next((layer.where(key) for layer in reversed(layers) if key and layer.sets(key)), fallback)
    dotted = ".".join(map(str, key)) or "(top level)"
    msg = str(err["msg"]).removeprefix("Value error, ").removeprefix("Assertion failed, ")
    for n in range(len(key)):  # a message that begins with the key it is about (its tail) says it once
        msg = msg.removeprefix(".".join(map(str, key[n:])) + ": ")
    value = err.get("input")
    got = "" if err["type"] == "missing" or isinstance(value, Mapping) else f" (got {_short(value)})"
    fix = _fix(err["type"], key, info, siblings, flag_of)
    more = f" (and {others} more error{'s' * (others > 1)})" if others else ""
    return f"{where}: {dotted}: {msg}{got}{more}; fix: {fix}"


def _names_a_key(err: Any) -> bool:
    """Whether the error's last location part is a key to name even when the model does not know it: an extra
    key, or the field a ``FieldValueError`` names (a key only a validator knows, e.g. a clean step's parameter)."""
    return err["type"] == "extra_forbidden" or isinstance((err.get("ctx") or {}).get("error"), FieldValueError)


def _field_loc(err: Any, layers: Sequence[_Layer]) -> Key:
    """Where an error is: pydantic's location, plus the field a ``FieldValueError`` of a model validator names
    (the first of its fields that the highest layer set: a bad ``num_heads`` in the file is named there)."""
    loc = tuple(err["loc"])
    cause = (err.get("ctx") or {}).get("error")
    if not isinstance(cause, FieldValueError) or not cause.fields:
        return loc
    paths = [(*loc, *name.split(".")) for name in cause.fields]  # a dotted name: a key below the field
    for layer in reversed(layers):
        for path in paths:
            if layer.sets(path):
                return path
    return paths[0]


def close_name_hint(name: str, known: Sequence[str]) -> str:
    """For a key nobody knows: the known key closest to ``name``, else all of them."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f"did you mean {close[0]}?" if close else f"known keys here: {', '.join(known)}"


def _short(value: Any, width: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def _fix(kind: str, key: Key, info: Any, siblings: Sequence[str], flag_of) -> str:
    dotted = ".".join(map(str, key))
    if kind == "extra_forbidden":
        return f"remove {dotted} or correct its name ({close_name_hint(str(key[-1]), siblings)})"
    flag = flag_of(key) if flag_of and key else None
    setter = f"{flag} (or {dotted} in the config file)" if flag else dotted or "the config"
    about = getattr(info, "description", None)
    what = f": {about}" if about else ""
    return f"{'set' if kind == 'missing' else 'change'} {setter}{what}"


def _resolve(model: type[BaseModel], loc: Key, extra: bool) -> tuple[Key, Any, list[str]]:
    """The part of ``loc`` that names fields, list items and dict keys (pydantic appends union member tags
    such as 'float' or 'dict[str,float]'), the field info of its last field, and the field names beside it
    (for a misspelt key). ``extra``: the last part is a key the model does not know."""
    key: list[str | int] = []
    tp: Any = model
    info: Any = None
    siblings = list(fields_of(model))
    for i, part in enumerate(loc):
        tp = _strip_optional(tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            fields = fields_of(tp)
            siblings = list(fields)
            if part not in fields:
                if extra and i == len(loc) - 1:
                    key.append(part)
                break
            info = fields[part]
            tp = info.annotation
        elif origin in (list, set, frozenset) and isinstance(part, int):
            tp = args[0] if args else Any
        elif origin is tuple and isinstance(part, int):
            tp = args[0] if len(args) == 2 and args[1] is Ellipsis else args[part] if part < len(args) else Any
        elif origin is dict and isinstance(part, str) and (extra or "[" not in part):
            tp = args[1] if args else Any
        else:
            break
        key.append(part)
    return tuple(key), info, siblings


def _strip_optional(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return _strip_optional(members[0])
    return tp

