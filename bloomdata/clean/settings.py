"""The steps a config names (``step_classes``) and one language's settings with their parameters (``Thresholds``).

``quality.steps`` names a built-in filter by its name and any step of a user's as ``package.module:ClassName``;
``step_classes`` resolves them through ``bloomdata.plugins`` (the project's one loader: where the config is
validated, and again in every process that runs the steps, e.g. a Dask worker) and checks what a step must
declare. The parameters of the per-language steps (the built-in filters and word removals, and every step of a
user's) are keys of ``quality.defaults`` and ``quality.languages.<lang>``: a name is one setting, read by every
step whose ``Params`` declares it and validated by each; unset, it takes the default of the first of them
(built-in steps first, then ``quality.steps`` in order). A key no step declares is an error naming it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ConfigDict, ValidationError
from pydantic.fields import FieldInfo

from bloomdata.clean.builtin import AFTER_FILTERS, BEFORE_FILTERS, BUILTIN_FILTERS, KEYERS, PER_LANGUAGE
from bloomdata.clean.sections import LanguageSettings
from bloomdata.clean.steps import Filter, Keyer, Modifier, Step
from bloomdata.config_loader import close_name_hint
from bloomdata.errors import BloomstackError, FieldValueError
from bloomdata.plugins import resolve

STEP_NAME = re.compile(r"[A-Za-z_][\w.-]*")
BASE_NAME = "bloomdata.clean.steps.Modifier, Filter or Keyer"


@functools.cache
def step_classes(names: tuple[str, ...]) -> tuple[type[Step], ...]:
    """The classes of ``quality.steps`` (a ``BloomstackError`` naming ``quality.steps[i]`` for a name that is
    neither a built-in filter nor an importable step class, or a class that lacks what a step declares)."""
    taken = {cls.name: f"the built-in {cls.name}" for cls in (*BEFORE_FILTERS, *AFTER_FILTERS, *KEYERS)}
    classes = []
    for i, name in enumerate(names):
        where = f"quality.steps[{i}]"
        cls = resolve(name, BUILTIN_FILTERS, Step, where, BASE_NAME)
        if not issubclass(cls, Modifier | Filter | Keyer):
            raise BloomstackError(f"{where} ({name}): not a subclass of {BASE_NAME}")
        _check_step(cls, f"{where} ({name})")
        if cls.name in taken:
            raise BloomstackError(f"{where} ({name}): its name {cls.name!r} is also {taken[cls.name]}'s; "
                                  "rename one, or list a step once")
        taken[cls.name] = f"quality.steps[{i}]"
        classes.append(cls)
    return tuple(classes)


def _check_step(cls: type[Step], where: str) -> None:
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not STEP_NAME.fullmatch(name):
        raise BloomstackError(f"{where}: give the class a name (name = 'my_step': letters, digits, '_', '.', '-')")
    required = [f for f, info in cls.Params.model_fields.items() if info.is_required()]
    if required:
        raise BloomstackError(f"{where}: parameter {required[0]} of its Params has no default; give it one")
    if isinstance(cls, type) and issubclass(cls, Filter) and not getattr(cls, "reasons", ()):
        raise BloomstackError(f"{where}: a filter needs its reasons (reasons = ('my_reason',))")
    if issubclass(cls, Keyer) and cls.joins and not (isinstance(cls.reason, str) and STEP_NAME.fullmatch(cls.reason)):
        raise BloomstackError(f"{where}: a keyer needs the reason its duplicates are removed for "
                              "(reason = 'my_reason')")


def per_language_steps(classes: Sequence[type[Step]]) -> tuple[type[Step], ...]:
    """The steps whose parameters are keys of ``quality.defaults`` and ``quality.languages``: the built-in filters
    and word removals, then the steps of ``quality.steps`` that are not built in, in order."""
    return (*PER_LANGUAGE, *(cls for cls in classes if cls not in PER_LANGUAGE and cls.section is None))


def parameters(steps: Sequence[type[Step]]) -> dict[str, list[type[Step]]]:
    """Each parameter name of ``steps`` and the steps that declare it, in order."""
    declared: dict[str, list[type[Step]]] = {}
    for step in steps:
        for name in step.Params.model_fields:
            declared.setdefault(name, []).append(step)
    return declared


def first_error(exc: ValidationError) -> tuple[str, str]:
    """(the field, its message with the value found) of a validation error's first error."""
    err = exc.errors()[0]
    got = "" if err["type"] == "missing" else f" (got {err.get('input')!r})"
    return ".".join(map(str, err["loc"])), f"{err['msg']}{got}"


def _schema(schema: dict[str, Any]) -> None:
    """``Thresholds``' JSON schema (the flows' parameter forms) with the built-in steps' parameters."""
    for step in PER_LANGUAGE:
        schema["properties"].update(step.Params.model_json_schema()["properties"])


class Thresholds(LanguageSettings):
    """One language's settings: its word rule (the fields here) and the parameters of every per-language step,
    flat (``min_words``, ``max_char_repetition``, ``remove_words_containing``, ...), validated by the steps that
    declare them (``Thresholds.of``). Null switches a threshold off.

    Words are word units (a word, or one character of an unspaced script) with punctuation, symbols and
    digits stripped, lower-cased. Ratios are in [0, 1].
    """

    model_config = ConfigDict(extra="allow", json_schema_extra=_schema)

    @classmethod
    def run_time_fields(cls) -> dict[str, FieldInfo]:
        """The built-in steps' parameters (``bloomdata.config_loader.fields_of``: flags, error messages)."""
        return {name: owners[0].Params.model_fields[name] for name, owners in parameters(PER_LANGUAGE).items()}

    @classmethod
    def of(cls, values: Mapping[str, Any], steps: Sequence[type[Step]]) -> Thresholds:
        """``values`` validated: the word rule by this model, each parameter by every step of ``steps`` that
        declares it (unset: the first one's default). A ``FieldValueError`` names the key at fault."""
        own = {k: v for k, v in values.items() if k in cls.model_fields}
        try:
            out = dict(LanguageSettings.model_validate(own))
        except ValidationError as exc:
            field, message = first_error(exc)
            raise FieldValueError(message, field) from None
        declared = parameters(steps)
        unknown = [k for k in values if k not in cls.model_fields and k not in declared]
        if unknown:
            known = [*cls.model_fields, *declared]
            raise FieldValueError(f"no filter step has a parameter {unknown[0]!r}; "
                                  f"{close_name_hint(unknown[0], known)}", unknown[0])
        for name, owners in declared.items():
            given = name in values
            value = (values[name] if given
                     else owners[0].Params.model_fields[name].get_default(call_default_factory=True))
            checked = [_checked(step, name, value, given, owners[0]) for step in owners]
            out[name] = checked[0]
        return cls.model_construct(**out)

    def values_for(self, step: type[Step]) -> dict[str, Any]:
        """The parameters ``step`` declares, from these settings."""
        return {name: self.param(name) for name in step.Params.model_fields}


def _checked(step: type[Step], name: str, value: Any, given: bool, first: type[Step]) -> Any:
    """``value`` as ``step``'s Params reads parameter ``name``; a ``FieldValueError`` if it does not fit."""
    try:
        return getattr(step.Params.model_validate({name: value}), name)
    except ValidationError as exc:
        _, message = first_error(exc)
        if not given:
            message += f": the default of step {first.name!r} does not suit step {step.name!r}; set {name}"
        raise FieldValueError(message, name) from None
