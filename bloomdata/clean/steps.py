"""The quality filters as steps: one class per filter, registered by name (datatrove's ``BaseFilter`` idea).

A step is built once per language (``build(language)``: ``None`` when its threshold is null or its model or
word list is missing there, so the step is off for that language) and asked ``keep(doc)`` for each document:
``True``, or the reason the document goes (a key of ``bloomdata.clean.config.FILTER_REASONS``).
``quality.steps`` lists the steps in the order they run; the first that says no names the reason.

Adding a filter is one class here (its name, what it measures, its threshold in ``Thresholds``) and its name
in ``quality.steps``. A ``Doc`` computes what several steps share (words, code points) once, on first use.
The measures are ROOTS's (bigscience-workshop/data-preparation, 01b_oscar_cleaning_and_filtering/
filtering.py); ``bloomdata.clean.filters`` holds them and resolves each language's settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from bloomdata.clean.measures import char_repetition_ratio, special_ratio, word_repetition_ratio
from bloomdata.clean.text import code_points, roots_flags

if TYPE_CHECKING:
    import numpy as np

    from bloomdata.clean.filters import Language


class Doc:
    """One document as the steps see it: its text (after the document modifications), its language's
    settings, and the views the measures share, each computed on first use."""

    __slots__ = ("text", "lang", "language", "_words", "_cp", "_count", "_flags")

    def __init__(self, text: str, lang: str | None, language: Language):
        self.text, self.lang, self.language = text, lang, language
        self._words: list[str] | None = None
        self._cp: np.ndarray | None = None
        self._count: int | None = None
        self._flags: int | None = None

    @property
    def words(self) -> list[str]:
        """Lower-cased words stripped of special characters (the language's word rule)."""
        if self._words is None:
            self._words = self.language.words(self)
        return self._words

    @property
    def word_count(self) -> int:
        """The number of words as ROOTS counts them (stripped, not lower-cased)."""
        if self._count is None:
            self._count = self.language.word_count(self)
        return self._count

    @property
    def flags(self) -> int:
        """``bloomdata.clean.text.roots_flags`` of the text (what ROOTS's word rule needs to know)."""
        if self._flags is None:
            self._flags = roots_flags(self.cp)
        return self._flags

    @property
    def cp(self) -> np.ndarray:
        if self._cp is None:
            self._cp = code_points(self.text)
        return self._cp


class Filter:
    """A quality filter: ``keep(doc)`` is True or the reason the document goes."""

    name: ClassVar[str]  # its key in quality.steps
    measures: ClassVar[str]  # what it measures, for people and docs
    reasons: ClassVar[tuple[str, ...]]  # the reasons it can give

    def __init__(self, language: Language):
        self.language = language
        self.t = language.t

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        """The step for one language, or None when it is off there."""
        return cls(language)

    def keep(self, doc: Doc) -> bool | str:
        raise NotImplementedError


FILTERS: dict[str, type[Filter]] = {}


def register(cls: type[Filter]) -> type[Filter]:
    FILTERS[cls.name] = cls
    return cls


@register
class Words(Filter):
    name = "words"
    measures = "the number of words (min_words, max_words)"
    reasons = ("too_few_words", "too_many_words")

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.t.min_words is None and language.t.max_words is None else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        n = doc.word_count
        if self.t.min_words is not None and n < self.t.min_words:
            return "too_few_words"
        if self.t.max_words is not None and n > self.t.max_words:
            return "too_many_words"
        return True


@register
class Chars(Filter):
    name = "chars"
    measures = "the number of characters (min_chars, max_chars)"
    reasons = ("too_few_chars", "too_many_chars")

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.t.min_chars is None and language.t.max_chars is None else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        if self.t.min_chars is not None and len(doc.text) < self.t.min_chars:
            return "too_few_chars"
        if self.t.max_chars is not None and len(doc.text) > self.t.max_chars:
            return "too_many_chars"
        return True


@register
class Bytes(Filter):
    name = "bytes"
    measures = "the UTF-8 size of the text (min_bytes; ROOTS catalogue's filter_small_docs_bytes)"
    reasons = ("too_few_bytes",)

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.t.min_bytes is None else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        size = len(doc.text) if doc.text.isascii() else len(doc.text.encode("utf-8"))
        return size >= self.t.min_bytes or self.reasons[0]


@register
class SpaceWords(Filter):
    name = "space_words"
    measures = "the pieces of the text split on single spaces (min_space_words; ROOTS catalogue's filter_small_docs)"
    reasons = ("too_few_space_words",)

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.t.min_space_words is None else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        return doc.text.count(" ") + 1 >= self.t.min_space_words or self.reasons[0]


@register
class SpecialCharacters(Filter):
    name = "special_characters"
    measures = "the share of characters that are special characters (max_special_chars)"
    reasons = ("special_characters",)

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.t.max_special_chars is None else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        return special_ratio(doc.cp, self.language.special) <= self.t.max_special_chars or self.reasons[0]


@register
class ClosedClassWords(Filter):
    name = "closed_class_words"
    measures = "the share of words in the language's closed-class (stop) word list (min_closed_class; ROOTS's " \
               "stopwords ratio)"
    reasons = ("closed_class_words",)

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.t.min_closed_class is None or not language.closed else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        ratio = self.language.word_list_ratio(doc.words, self.language.closed)
        return ratio >= self.t.min_closed_class or self.reasons[0]


@register
class FlaggedWords(Filter):
    name = "flagged_words"
    measures = "the share of words in the language's flagged-word list (max_flagged)"
    reasons = ("flagged_words",)

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.t.max_flagged is None or not language.flagged else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        return self.language.word_list_ratio(doc.words, self.language.flagged) <= self.t.max_flagged or self.reasons[0]


@register
class WordRepetition(Filter):
    name = "word_repetition"
    measures = "the share of word n-grams that occur more than once (word_repetition_n, max_word_repetition)"
    reasons = ("word_repetition",)

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.t.max_word_repetition is None else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        ratio = word_repetition_ratio(doc.words, self.t.word_repetition_n)
        return ratio <= self.t.max_word_repetition or self.reasons[0]


@register
class CharRepetition(Filter):
    name = "char_repetition"
    measures = "the share of character n-grams covered by the sqrt(#distinct) most frequent repeated ones " \
               "(char_repetition_n, max_char_repetition)"
    reasons = ("char_repetition",)

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.t.max_char_repetition is None else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        ratio = char_repetition_ratio(doc.cp, self.t.char_repetition_n)
        return ratio <= self.t.max_char_repetition or self.reasons[0]


@register
class LanguageId(Filter):
    name = "lang_id"
    measures = "fastText's probability of the document's own language when it is the top label " \
               "(min_lang_id_score; lang_id.model)"
    reasons = ("lang_id",)

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.lang_id is None or language.t.min_lang_id_score is None else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        return self.language.lang_id.score(doc.text, doc.lang) >= self.t.min_lang_id_score or self.reasons[0]


@register
class Perplexity(Filter):
    name = "perplexity"
    measures = "KenLM perplexity of the document, line by line (max_perplexity; perplexity.models)"
    reasons = ("perplexity",)

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        return None if language.kenlm is None or language.t.max_perplexity is None else cls(language)

    def keep(self, doc: Doc) -> bool | str:
        from bloomdata.clean.models import perplexity

        score = perplexity(self.language.kenlm, doc.text, self.language.sentencepiece)
        return score <= self.t.max_perplexity or self.reasons[0]
