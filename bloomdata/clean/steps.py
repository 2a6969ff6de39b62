"""The quality filters as steps: one class per filter, registered by name (datatrove's ``BaseFilter`` idea).

A step is built once per language (``build(language)``: ``None`` when its threshold is null or its model or
word list is missing there, so the step is off for that language) and asked ``keep(doc)`` for each document:
``True``, or the reason the document goes (a key of ``bloomdata.clean.config.FILTER_REASONS``).
``quality.steps`` lists the steps in the order they run; the first that says no names the reason.

Adding a filter is one class here (its name, what it measures, its threshold in ``Thresholds``; ``Limit``
and ``Range`` hold the comparisons) and its name in ``quality.steps``. A ``Doc`` computes what several steps share (words, code points) once, on first use.
The measures are ROOTS's (bigscience-workshop/data-preparation, 01b_oscar_cleaning_and_filtering/
filtering.py); ``bloomdata.clean.filters`` holds them and resolves each language's settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from bloomdata.clean.measures import char_repetition_ratio, special_ratio, word_repetition_ratio
from bloomdata.clean.models import perplexity
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
    thresholds: ClassVar[tuple[str, ...]]  # its ``Thresholds`` fields: off for a language where all are null
    needs: ClassVar[str | None] = None  # a ``Language`` attribute it needs (word list, model): off without it

    def __init__(self, language: Language):
        self.language = language
        self.t = language.t

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        """The step for one language, or None when it is off there."""
        if all(getattr(language.t, field) is None for field in cls.thresholds) or not cls.available(language):
            return None
        return cls(language)

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

    def __init__(self, language: Language):
        super().__init__(language)
        self.limit = getattr(self.t, self.thresholds[0])
        self.floor = self.thresholds[0].startswith("min_")

    def keep(self, doc: Doc) -> bool | str:
        value = self.measure(doc)
        return (value >= self.limit if self.floor else value <= self.limit) or self.reasons[0]


class Range(Filter):
    """A count between a floor and a ceiling (``thresholds``: min, max; ``reasons``: too few, too many)."""

    def count(self, doc: Doc) -> int:
        raise NotImplementedError

    def __init__(self, language: Language):
        super().__init__(language)
        self.low, self.high = (getattr(self.t, field) for field in self.thresholds)

    def keep(self, doc: Doc) -> bool | str:
        low, high = self.low, self.high
        n = self.count(doc)
        if low is not None and n < low:
            return self.reasons[0]
        if high is not None and n > high:
            return self.reasons[1]
        return True


FILTERS: dict[str, type[Filter]] = {}


def register(cls: type[Filter]) -> type[Filter]:
    FILTERS[cls.name] = cls
    return cls


@register
class Words(Range):
    name = "words"
    measures = "the number of words (ROOTS: stripped, not lower-cased)"
    reasons = ("too_few_words", "too_many_words")
    thresholds = ("min_words", "max_words")

    def count(self, doc: Doc) -> int:
        return doc.word_count


@register
class Chars(Range):
    name = "chars"
    measures = "the number of characters"
    reasons = ("too_few_chars", "too_many_chars")
    thresholds = ("min_chars", "max_chars")

    def count(self, doc: Doc) -> int:
        return len(doc.text)


@register
class Bytes(Limit):
    name = "bytes"
    measures = "the UTF-8 size of the text (ROOTS catalogue's filter_small_docs_bytes)"
    reasons = ("too_few_bytes",)
    thresholds = ("min_bytes",)

    def measure(self, doc: Doc) -> float:
        return len(doc.text) if doc.text.isascii() else len(doc.text.encode("utf-8"))


@register
class SpaceWords(Limit):
    name = "space_words"
    measures = "the pieces of the text split on single spaces (ROOTS catalogue's filter_small_docs)"
    reasons = ("too_few_space_words",)
    thresholds = ("min_space_words",)

    def measure(self, doc: Doc) -> float:
        return doc.text.count(" ") + 1


@register
class SpecialCharacters(Limit):
    name = "special_characters"
    measures = "the share of characters that are special characters"
    reasons = ("special_characters",)
    thresholds = ("max_special_chars",)

    def measure(self, doc: Doc) -> float:
        return special_ratio(doc.cp, self.language.special)


@register
class ClosedClassWords(Limit):
    name = "closed_class_words"
    measures = "the share of words in the language's closed-class (stop) word list (ROOTS's stopwords ratio)"
    reasons = ("closed_class_words",)
    thresholds = ("min_closed_class",)
    needs = "closed"

    def measure(self, doc: Doc) -> float:
        assert self.language.closed is not None  # needs = "closed": the step runs only with a list
        return self.language.word_list_ratio(doc.words, self.language.closed)


@register
class FlaggedWords(Limit):
    name = "flagged_words"
    measures = "the share of words in the language's flagged-word list"
    reasons = ("flagged_words",)
    thresholds = ("max_flagged",)
    needs = "flagged"

    def measure(self, doc: Doc) -> float:
        assert self.language.flagged is not None  # needs = "flagged"
        return self.language.word_list_ratio(doc.words, self.language.flagged)


@register
class WordRepetition(Limit):
    name = "word_repetition"
    measures = "the share of word n-grams that occur more than once (n: word_repetition_n)"
    reasons = ("word_repetition",)
    thresholds = ("max_word_repetition",)

    def measure(self, doc: Doc) -> float:
        return word_repetition_ratio(doc.words, self.t.word_repetition_n)


@register
class CharRepetition(Limit):
    name = "char_repetition"
    measures = "the share of character n-grams covered by the sqrt(#distinct) most frequent repeated ones " \
               "(n: char_repetition_n)"
    reasons = ("char_repetition",)
    thresholds = ("max_char_repetition",)

    def measure(self, doc: Doc) -> float:
        return char_repetition_ratio(doc.cp, self.t.char_repetition_n)


@register
class LanguageId(Limit):
    name = "lang_id"
    measures = "fastText's probability of the document's own language when it is the top label (lang_id.model)"
    reasons = ("lang_id",)
    thresholds = ("min_lang_id_score",)
    needs = "lang_id"

    def measure(self, doc: Doc) -> float:
        assert self.language.lang_id is not None  # needs = "lang_id"
        return self.language.lang_id.score(doc.text, doc.lang or "")


@register
class Perplexity(Limit):
    name = "perplexity"
    measures = "KenLM perplexity of the document, line by line (perplexity.models)"
    reasons = ("perplexity",)
    thresholds = ("max_perplexity",)
    needs = "kenlm"

    def measure(self, doc: Doc) -> float:
        return perplexity(self.language.kenlm, doc.text, self.language.sentencepiece)
