"""The shipped modifiers (``bloomdata.clean.steps.Modifier``), one class each; ``bloomdata.clean.builtin`` lists
them and where they run: normalization and ROOTS's word removals before the filters, PII redaction after."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from bloomdata.clean.language import Doc, Language
from bloomdata.clean.pii import redact
from bloomdata.clean.sections import NormalizeConfig, PiiConfig, StepParams
from bloomdata.clean.steps import Modifier
from bloomdata.clean.text import normalize, roots_remove_words

if TYPE_CHECKING:
    from bloomdata.clean.summary import LangCounts


class Normalize(Modifier):
    """Whitespace, control characters and (optionally) Unicode form, or ROOTS's document modification
    (``bloomdata.clean.text.normalize``)."""

    name = "normalize"
    section = "normalize"
    Params = NormalizeConfig
    params: NormalizeConfig

    @classmethod
    def build(cls, params: StepParams, language: Language) -> Modifier | None:
        assert isinstance(params, NormalizeConfig)
        return cls(params, language) if params.enabled else None

    def modify(self, doc: Doc) -> str:
        return normalize(doc.text, self.params)


class RemoveWords(Modifier):
    """ROOTS's per-language word removals: words (space-separated, stripped) holding a given substring or longer
    than a length cut leave the text (``bloomdata.clean.text.roots_remove_words``)."""

    name = "remove_words"

    class Params(StepParams):
        remove_words_containing: list[str] | None = Field(
            default=None, description="drop from the text every word (space-separated, stripped) holding one of "
                                      "these substrings, e.g. [http, www, .com, href, //] (ROOTS); lines, tabs and "
                                      "spaces are re-joined as ROOTS did")
        max_word_length: int | None = Field(
            default=None, ge=1, description="drop from the text words longer than this (also after stripping) (ROOTS)")

    params: Params

    @classmethod
    def build(cls, params: StepParams, language: Language) -> Modifier | None:
        assert isinstance(params, cls.Params)
        on = bool(params.remove_words_containing) or params.max_word_length is not None
        return cls(params, language) if on else None

    def modify(self, doc: Doc) -> str:
        if not doc.text:
            return doc.text
        return roots_remove_words(doc.text, self.params.remove_words_containing, self.params.max_word_length)


class Redact(Modifier):
    """PII redaction (``bloomdata.clean.pii.redact``): each match replaced by its category's placeholder; the
    language's counts record how many of each."""

    name = "pii"
    section = "pii"
    Params = PiiConfig
    params: PiiConfig
    clock = "pii"

    @classmethod
    def build(cls, params: StepParams, language: Language) -> Modifier | None:
        assert isinstance(params, PiiConfig)
        return cls(params, language) if params.enabled else None

    def modify(self, doc: Doc) -> str:
        return redact(doc.text, self.params).text

    def apply(self, doc: Doc, counts: LangCounts) -> None:
        redaction = redact(doc.text, self.params)
        if any(redaction[1:]):
            counts.redacted(redaction)
            doc.text = redaction.text
