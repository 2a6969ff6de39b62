"""The steps of a clean run, built from its config: each language and its modifiers and filters resolved once
(``QualityFilter``), run in order on each document; the keyers of a shard (``build_keyers``).

Every document goes through the built-in modifiers (``bloomdata.clean.builtin.BEFORE_FILTERS``), then the
modifiers and filters of ``quality.steps`` in their order, then the built-in modifiers after the filters (PII
redaction). The first filter that says no names the reason; a document with no text (as read, or after a
modifier) goes as ``empty``. What a language is (settings, word lists, models, word rule):
``bloomdata.clean.language``.
"""

from __future__ import annotations

import collections
import functools
import time
from collections.abc import Sequence

from bloomdata.clean.builtin import AFTER_FILTERS, BEFORE_FILTERS, KEYERS, MODEL_FILTERS
from bloomdata.clean.config import CleanConfig, step_params
from bloomdata.clean.files import EMPTY
from bloomdata.clean.lang_models import LangId, perplexity_model, sentencepiece_model
from bloomdata.clean.language import Doc, Language, lookup, word_set
from bloomdata.clean.steps import Filter, Keyer, Modifier, Step
from bloomdata.clean.summary import LangCounts
from bloomdata.clean.text import roots_special_table, special_table

Steps = Sequence[Modifier | Filter]


class QualityFilter:
    """``process(text, lang, counts)``: the document after every modifier, or the reason it goes; the same in
    parts: ``document(text, lang)`` (the modifiers before the filters) and ``reason(doc)`` (``quality.steps``)."""

    def __init__(self, config: CleanConfig, closed: dict[str, list[str]], flagged: dict[str, list[str]]):
        self.config = config
        self.closed, self.flagged = closed, flagged
        self.lang_id = LangId(config.lang_id) if config.lang_id.model else None
        self.language = functools.lru_cache(maxsize=256)(self._resolve)
        self.segments = functools.lru_cache(maxsize=256)(self._segments)
        self.seconds: collections.defaultdict[str, float] = collections.defaultdict(float)  # per Step.clock

    def _resolve(self, lang: str | None) -> Language:
        config, quality = self.config, self.config.quality
        kenlm = lookup(config.perplexity.models, lang)
        sentencepiece = lookup(config.sentencepiece.models, lang)
        return Language(lang, quality.thresholds_for(lang), closed=word_set(self.closed, lang),
                        flagged=word_set(self.flagged, lang), lang_id=self.lang_id,
                        kenlm=perplexity_model(kenlm) if kenlm else None,
                        sentencepiece=sentencepiece_model(sentencepiece) if sentencepiece else None,
                        roots=quality.words == "roots",
                        special=roots_special_table() if quality.special_characters == "roots" else special_table())

    def _segments(self, lang: str | None) -> tuple[list[Modifier | Filter], ...]:
        """The steps that are on for ``lang``: the built-in modifiers before the filters, those of
        ``quality.steps`` (filters only where ``quality.enabled``, but for the model filters), the modifiers
        after."""
        quality = self.config.quality
        listed = [cls for cls in quality.step_classes() if issubclass(cls, (Modifier, Filter))
                  and (quality.enabled or not issubclass(cls, Filter) or cls in MODEL_FILTERS)]
        return self._build(BEFORE_FILTERS, lang), self._build(listed, lang), self._build(AFTER_FILTERS, lang)

    def _build(self, classes: Sequence[type[Modifier] | type[Filter]], lang: str | None) -> list[Modifier | Filter]:
        language = self.language(lang)
        built = (cls.build(step_params(self.config, cls, lang), language) for cls in classes)
        return [step for step in built if step is not None]

    def steps(self, lang: str | None) -> list[Filter]:
        """The filters that are on for ``lang``, in ``quality.steps`` order."""
        return [step for step in self.segments(lang)[1] if isinstance(step, Filter)]

    def process(self, text: str, lang: str | None, counts: LangCounts) -> Doc | str:
        """``text`` (as read) through every modifier and filter: the document, or the reason it goes."""
        doc = Doc(text, lang, self.language(lang))
        for steps in self.segments(lang):
            reason = self.run(doc, steps, counts)
            if reason is not None:
                return reason
        return doc

    def document(self, text: str, lang: str | None) -> Doc:
        """The document after the modifiers before the filters (normalization, its language's word removals)."""
        doc = Doc(text, lang, self.language(lang))
        self.run(doc, self.segments(lang)[0], LangCounts())
        return doc

    def check(self, text: str, lang: str | None) -> str | None:
        """The reason to remove ``text`` (as read), or None."""
        return self.reason(self.document(text, lang))

    def reason(self, doc: Doc, steps: Steps | None = None) -> str | None:
        """The first reason to remove ``doc`` (``steps``: these instead of its language's of ``quality.steps``),
        or None; a modifier among them changes ``doc``."""
        return self.run(doc, self.segments(doc.lang)[1] if steps is None else steps, LangCounts())

    def run(self, doc: Doc, steps: Steps, counts: LangCounts) -> str | None:
        """``steps`` in order on ``doc``: the first reason to remove it (``empty`` when it has no text, to begin
        with or after a modifier), or None. Each step's time goes to its clock in ``seconds``."""
        if not doc.text:
            return EMPTY
        seconds = self.seconds
        for step in steps:
            start = time.perf_counter()
            if isinstance(step, Filter):
                verdict = step.keep(doc)
                reason = None if verdict is True else verdict if isinstance(verdict, str) else step.reasons[0]
            else:
                step.apply(doc, counts)
                reason = None if doc.text else EMPTY
            seconds[step.clock] += time.perf_counter() - start
            if reason is not None:
                return reason
        return None


def build_keyers(config: CleanConfig) -> list[Keyer]:
    """The keyers of one shard (or of the run's join plan) that are on: the built-in ones, then those of
    ``quality.steps``, in order."""
    classes: list[type[Step]] = [*KEYERS, *(c for c in config.quality.step_classes() if issubclass(c, Keyer))]
    built = (cls.build(step_params(config, cls, None)) for cls in classes if issubclass(cls, Keyer))
    return [keyer for keyer in built if keyer is not None]
