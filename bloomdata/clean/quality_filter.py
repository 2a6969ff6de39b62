"""The quality filters of a clean run: each language and its steps resolved once, and the steps run in order.

``QualityFilter.document(text, lang)`` applies the document modifications (``normalize``, then ROOTS's
per-language word removals when set) and returns a ``Doc``; ``QualityFilter.reason(doc)`` runs the
language's steps (``bloomdata.clean.steps``) in ``quality.steps`` order and returns the first reason to
remove it, or None. What a language is (settings, word lists, models, word rule): ``bloomdata.clean.language``.
"""

from __future__ import annotations

import functools

from bloomdata.clean.config import EMPTY, CleanConfig
from bloomdata.clean.lang_models import LangId
from bloomdata.clean.language import Doc, Language
from bloomdata.clean.steps import Filter, step_class
from bloomdata.clean.text import normalize

MODEL_STEPS = ("lang_id", "perplexity")  # steps that run even with quality.enabled off (they need a model)


class QualityFilter:
    """``document(text, lang)``: the modified document; ``reason(doc)``: the first failed step, or None."""

    def __init__(self, config: CleanConfig, closed: dict[str, list[str]], flagged: dict[str, list[str]]):
        self.config = config
        self.closed, self.flagged = closed, flagged
        self.lang_id = LangId(config.lang_id) if config.lang_id.model else None
        self.language = functools.lru_cache(maxsize=256)(self._resolve)
        self.steps = functools.lru_cache(maxsize=256)(self._steps)

    def _resolve(self, lang: str | None) -> Language:
        return Language(lang, self.config, self.closed, self.flagged, self.lang_id)

    def _steps(self, lang: str | None) -> list[Filter]:
        """The steps that are on for ``lang``, in ``quality.steps`` order."""
        quality, language = self.config.quality, self.language(lang)
        built = (step_class(quality, name).build(language) for name in quality.steps
                 if quality.enabled or name in MODEL_STEPS)
        return [step for step in built if step is not None]

    def document(self, text: str, lang: str | None) -> Doc:
        """The document after normalization and its language's word removals."""
        language = self.language(lang)
        return Doc(language.modify(normalize(text, self.config.normalize)), lang, language)

    def check(self, text: str, lang: str | None) -> str | None:
        """The reason to remove ``text`` (as read), or None."""
        return self.reason(self.document(text, lang))

    def reason(self, doc: Doc, steps: list[Filter] | None = None) -> str | None:
        """The first reason to remove ``doc`` (``steps``: these instead of all its language's), or None."""
        if not doc.text:
            return EMPTY
        for step in self.steps(doc.lang) if steps is None else steps:
            verdict = step.keep(doc)
            if verdict is not True:
                return verdict if isinstance(verdict, str) else step.reasons[0]
        return None
