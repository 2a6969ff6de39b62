"""The three kinds of cleaning step, each one class: a ``Modifier`` changes the text, a ``Filter`` keeps a
document or names the reason it goes, a ``Keyer`` gives a dedup key (documents with equal keys are duplicates:
the first in plan order stays).

A step declares its ``name`` (a short identifier: messages, work files), its ``Params`` (a ``StepParams`` model:
each parameter's type, default and bounds; unknown keys refused) and what it does. ``bloomdata.clean.builtin``
lists the shipped steps. A step of your own is a class in any module, named in ``quality.steps`` as
``package.module:ClassName``: it is imported through ``bloomdata.plugins`` where the config is loaded and again
on every Dask worker (the module must be importable there). Its parameters are set like a built-in's, in
``quality.defaults`` and per language in ``quality.languages.<lang>`` (a keyer's for every language only); two
steps that declare the same parameter name read the same setting, each validating it with its own ``Params``.

Where each kind runs (``bloomdata.clean.quality_filter``, ``bloomdata.clean.shard``): every document goes through
the built-in modifiers (normalize, ROOTS's word removals), then the modifiers and filters of ``quality.steps`` in
their order (the first filter that says no names the reason; a document a modifier leaves empty goes as
``empty``), then PII redaction; a document that passed is a candidate, and every keyer (the built-in ones, then
those of ``quality.steps``) adds its key. Modifiers and filters are built once per language
(``build(params, language)``: None when the step is off there); keyers once per shard (``build(params)``).
"""

from __future__ import annotations

import types
import typing
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from bloomdata.clean.dedup import JoinTask
from bloomdata.clean.language import Doc, Language
from bloomdata.clean.sections import StepParams

if TYPE_CHECKING:
    from bloomdata.clean.summary import LangCounts

__all__ = ["Filter", "Keyer", "Limit", "Modifier", "Range", "Step", "StepParams"]  # what a step's module imports

KEY_MASK = (1 << 64) - 1


class Step:
    """What every step declares (see the module docstring)."""

    name: ClassVar[str]  # a short identifier: messages and work files
    Params: ClassVar[type[StepParams]] = StepParams  # its parameters (every one with a default)
    section: ClassVar[str | None] = None  # a built-in's CleanConfig section holding its Params for every language
    clock: ClassVar[str]  # the entry of the summary's step_seconds its time goes to


def _nullable(annotation: Any) -> bool:
    return (typing.get_origin(annotation) in (typing.Union, types.UnionType)
            and type(None) in typing.get_args(annotation))


class Modifier(Step):
    """Changes a document's text: ``modify(doc)`` returns the new text (``self.params``: its parameters for the
    document's language)."""

    clock = "normalize"

    def __init__(self, params: StepParams, language: Language):
        self.params, self.language = params, language

    @classmethod
    def build(cls, params: StepParams, language: Language) -> Modifier | None:
        """The step for one language, or None when it is off there (by default it is always on)."""
        return cls(params, language)

    def modify(self, doc: Doc) -> str:
        raise NotImplementedError

    def apply(self, doc: Doc, counts: LangCounts) -> None:
        """Change ``doc`` in place (what the pipeline calls; ``counts``: its language's, for a step that counts
        what it changed)."""
        doc.text = self.modify(doc)


class Filter(Step):
    """Keeps a document or names why it goes: ``keep(doc)`` is True, or the reason (False: its first reason).

    A parameter of its ``Params`` that may be null is a threshold; the step is off for a language where all its
    thresholds are null, or where what it ``needs`` (a ``Language`` attribute: a word list, a model) is missing.
    """

    measures: ClassVar[str]  # what it measures, for people and docs
    reasons: ClassVar[tuple[str, ...]]  # the reasons it can give, the first its usual one
    thresholds: ClassVar[tuple[str, ...]]  # its Params that may be null (set for every subclass)
    needs: ClassVar[str | None] = None  # a ``Language`` attribute it needs (word list, model): off without it
    after_templates: ClassVar[bool] = False  # checked again after template removal (ROOTS's catalogue did)
    clock = "filter"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.thresholds = tuple(f for f, info in cls.Params.model_fields.items() if _nullable(info.annotation))
        if "name" in cls.__dict__ and (not getattr(cls, "reasons", ()) or not cls.thresholds):
            raise TypeError(f"filter step {cls.name!r}: give it reasons and at least one parameter that may be "
                            "null (its threshold)")

    def __init__(self, params: StepParams, language: Language):
        self.params, self.language = params, language

    @classmethod
    def build(cls, params: StepParams, language: Language) -> Filter | None:
        """The step for one language, or None when it is off there."""
        if all(getattr(params, field) is None for field in cls.thresholds) or not cls.available(language):
            return None
        return cls(params, language)

    @classmethod
    def available(cls, language: Language) -> bool:
        """Whether what the step needs besides thresholds (a word list, a model) is there for the language."""
        return cls.needs is None or bool(getattr(language, cls.needs))

    def keep(self, doc: Doc) -> bool | str:
        raise NotImplementedError


class Limit(Filter):
    """One measure against one threshold: a ``min_*`` threshold is a floor, a ``max_*`` one a ceiling."""

    def measure(self, doc: Doc) -> float:
        raise NotImplementedError

    def __init__(self, params: StepParams, language: Language):
        super().__init__(params, language)
        self.limit = getattr(params, self.thresholds[0])
        self.floor = self.thresholds[0].startswith("min_")

    def keep(self, doc: Doc) -> bool | str:
        value = self.measure(doc)
        return (value >= self.limit if self.floor else value <= self.limit) or self.reasons[0]


class Range(Filter):
    """A count between a floor and a ceiling (``thresholds``: min, max; ``reasons``: too few, too many)."""

    def count(self, doc: Doc) -> int:
        raise NotImplementedError

    def __init__(self, params: StepParams, language: Language):
        super().__init__(params, language)
        self.low, self.high = (getattr(params, field) for field in self.thresholds)

    def keep(self, doc: Doc) -> bool | str:
        low, high = self.low, self.high
        n = self.count(doc)
        if low is not None and n < low:
            return self.reasons[0]
        if high is not None and n > high:
            return self.reasons[1]
        return True


class Keyer(Step):
    """A dedup key: ``key(doc)`` is an int (taken mod 2**64) or None (no key: never a duplicate); documents with
    equal keys are duplicates of the first in plan order, removed under ``reason``.

    One keyer is built per shard and sees every candidate of it, in order (``add(doc, candidate)``, candidates
    numbered 0, 1, ...); at the end of the shard it gives the arrays it writes in the shard's work directory
    (``files``, ``arrays``), and the run joins them with those of every other shard (``join_tasks``: the band
    join tasks of ``bloomdata.clean.dedup``, each writing ``OUT/work/join/<task>.npy`` and its marker). The base
    class writes ``<name>.keys.npy``: uint64[1, 2, m], (key, candidate) sorted by key, then candidate. The
    built-in keyers (``bloomdata.clean.keyers``) override these to write their own tables.
    """

    reason: ClassVar[str] = "near_duplicate"
    joins: ClassVar[bool] = True  # its keys are joined into duplicate pairs (template lines are counted instead)
    clock = "minhash"

    def __init__(self, params: StepParams):
        self.params = params
        self._keys: list[int] = []
        self._candidates: list[int] = []

    @classmethod
    def build(cls, params: StepParams) -> Keyer | None:
        """The keyer of a shard, or None when it is off (by default it is always on)."""
        return cls(params)

    def key(self, doc: Doc) -> int | None:
        raise NotImplementedError

    def add(self, doc: Doc, candidate: int) -> None:
        """Take the key of candidate ``candidate``."""
        key = self.key(doc)
        if key is not None:
            self._keys.append(key & KEY_MASK)
            self._candidates.append(candidate)

    def finish(self) -> None:
        """Called once after the shard's last candidate (a keyer that batches its work finishes it here)."""

    def files(self) -> tuple[str, ...]:
        """What it writes in each shard's work directory (a reused shard must still hold them)."""
        return (f"{self.name}.keys.npy",)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every file of ``files`` and its array, at the end of the shard."""
        keys = np.array(self._keys, dtype=np.uint64)
        candidates = np.array(self._candidates, dtype=np.uint64)
        order = np.lexsort((candidates, keys))
        return {self.files()[0]: np.stack([keys[order], candidates[order]])[None]}

    def join_tasks(self, parts: int, code: int) -> list[JoinTask]:
        """Its join tasks, each a ``1/parts`` range of its keys; ``code``: its reason's in the resolve files."""
        return [JoinTask(0, part, parts, "keys", file=self.files()[0], code=code) for part in range(parts)]
