"""The quality filters as steps: one class per filter (datatrove's ``BaseFilter`` idea).

A filter step is one class, and adding one is writing it (here or in any module imported before the config
is loaded): its ``name`` (its key in ``quality.steps``), what it ``measures``, the ``reasons`` it removes a
document for, its ``Params`` (a ``StepParams`` model: each parameter's type, default and bounds; a parameter
that may be null is a threshold), and ``keep(doc)``. Defining the class registers it
(``bloomdata.clean.config.register_filter``): the config then accepts its name and its parameters, per
language too (``quality.defaults``, ``quality.languages``, the flags), and the summary, the report and the
removed examples count its reasons. ``Limit`` and ``Range`` hold the usual comparisons.

A step is built once per language (``build(language)``: ``None`` when all its thresholds are null or its model
or word list is missing there, so the step is off for that language) and asked ``keep(doc)`` for each
document: ``True``, or the reason the document goes. ``quality.steps`` lists the steps in the order they run;
the first that says no names the reason. A ``Doc`` (``bloomdata.clean.language``) computes what several steps
share (words, code points) once, on first use. The measures are ROOTS's (bigscience-workshop/
data-preparation, 01b_oscar_cleaning_and_filtering/filtering.py; ``bloomdata.clean.measures``).
"""

from __future__ import annotations

import types
import typing
from typing import Any, ClassVar

from pydantic import Field

from bloomdata.clean.config import QualityConfig, StepParams, register_filter
from bloomdata.clean.lang_models import perplexity
from bloomdata.clean.language import Doc, Language
from bloomdata.clean.measures import char_repetition_ratio, special_ratio, word_repetition_ratio


def _nullable(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


class Filter:
    """A quality filter: ``keep(doc)`` is True or the reason the document goes. A subclass that sets ``name``
    is a step of the config (see the module docstring)."""

    name: ClassVar[str]  # its key in quality.steps
    measures: ClassVar[str]  # what it measures, for people and docs
    reasons: ClassVar[tuple[str, ...]]  # the reasons it can give, the first its usual one
    Params = StepParams  # its parameters for one language (a subclass of StepParams)
    p: StepParams  # their values for the language
    thresholds: ClassVar[tuple[str, ...]]  # the Params that may be null: off for a language where all are
    needs: ClassVar[str | None] = None  # a ``Language`` attribute it needs (word list, model): off without it
    after_templates: ClassVar[bool] = False  # checked again after template removal (ROOTS's catalogue did)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:  # an intermediate class (Limit, Range)
            return
        cls.thresholds = tuple(f for f, info in cls.Params.model_fields.items() if _nullable(info.annotation))
        if not cls.reasons or not cls.thresholds:
            raise TypeError(f"filter step {cls.name!r}: give it reasons and at least one parameter that may be "
                            "null (its threshold)")
        register_filter(cls)

    def __init__(self, language: Language):
        self.language = language
        self.t = language.t
        self.p = self.Params.model_construct(**{f: language.t.param(f) for f in self.Params.model_fields})

    @classmethod
    def build(cls, language: Language) -> Filter | None:
        """The step for one language, or None when it is off there."""
        if all(language.t.param(field) is None for field in cls.thresholds) or not cls.available(language):
            return None
        return cls(language)

    @classmethod
    def available(cls, language: Language) -> bool:
        """Whether what the step needs besides thresholds (a word list, a model) is there for the language."""
        return cls.needs is None or bool(getattr(language, cls.needs))

    def keep(self, doc: Doc) -> bool | str:
        raise NotImplementedError


def step_class(quality: QualityConfig, name: str) -> type[Filter]:
    """The class of ``quality``'s step ``name``."""
    cls = quality.step_class(name)
    assert isinstance(cls, type) and issubclass(cls, Filter)  # only Filter subclasses register
    return cls


class Limit(Filter):
    """One measure against one threshold: a ``min_*`` threshold is a floor, a ``max_*`` one a ceiling."""

    def measure(self, doc: Doc) -> float:
        raise NotImplementedError

    def __init__(self, language: Language):
        super().__init__(language)
        self.limit = getattr(self.p, self.thresholds[0])
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
        self.low, self.high = (getattr(self.p, field) for field in self.thresholds)

    def keep(self, doc: Doc) -> bool | str:
        low, high = self.low, self.high
        n = self.count(doc)
        if low is not None and n < low:
            return self.reasons[0]
        if high is not None and n > high:
            return self.reasons[1]
        return True


class Words(Range):
    name = "words"
    measures = "the number of words (ROOTS: stripped, not lower-cased)"
    reasons = ("too_few_words", "too_many_words")

    class Params(StepParams):
        min_words: int | None = Field(default=10, ge=0, description="fewest word units in a document")
        max_words: int | None = Field(default=100_000, ge=1, description="most word units in a document")

    def count(self, doc: Doc) -> int:
        return doc.word_count


class Chars(Range):
    name = "chars"
    measures = "the number of characters"
    reasons = ("too_few_chars", "too_many_chars")

    class Params(StepParams):
        min_chars: int | None = Field(default=30, ge=0, description="fewest characters (after normalization)")
        max_chars: int | None = Field(default=None, ge=1, description="most characters (after normalization)")

    def count(self, doc: Doc) -> int:
        return len(doc.text)


class Bytes(Limit):
    name = "bytes"
    measures = "the UTF-8 size of the text (ROOTS catalogue's filter_small_docs_bytes)"
    reasons = ("too_few_bytes",)
    after_templates = True

    class Params(StepParams):
        min_bytes: int | None = Field(default=None, ge=1, description="fewest UTF-8 bytes (catalogue: 300 or 1024)")

    def measure(self, doc: Doc) -> float:
        return len(doc.text) if doc.text.isascii() else len(doc.text.encode("utf-8"))


class SpaceWords(Limit):
    name = "space_words"
    measures = "the pieces of the text split on single spaces (ROOTS catalogue's filter_small_docs)"
    reasons = ("too_few_space_words",)
    after_templates = True

    class Params(StepParams):
        min_space_words: int | None = Field(
            default=None, ge=1, description="fewest pieces of the text split on ' ' (catalogue's filter_small_docs: "
                                            "15; runs of spaces count their empty pieces, as there)")

    def measure(self, doc: Doc) -> float:
        return doc.text.count(" ") + 1


class SpecialCharacters(Limit):
    name = "special_characters"
    measures = "the share of characters that are special characters"
    reasons = ("special_characters",)

    class Params(StepParams):
        max_special_chars: float | None = Field(
            default=0.4, ge=0, le=1, description="most characters that are punctuation, symbols, digits or spaces")

    def measure(self, doc: Doc) -> float:
        return special_ratio(doc.cp, self.language.special)


class ClosedClassWords(Limit):
    name = "closed_class_words"
    measures = "the share of words in the language's closed-class (stop) word list (ROOTS's stopwords ratio)"
    reasons = ("closed_class_words",)
    needs = "closed"

    class Params(StepParams):
        min_closed_class: float | None = Field(
            default=0.05, ge=0, le=1, description="fewest closed-class words (share of words); languages without a "
                                                 "list skip it")

    def measure(self, doc: Doc) -> float:
        assert self.language.closed is not None  # needs = "closed": the step runs only with a list
        return self.language.word_list_ratio(doc.words, self.language.closed)


class FlaggedWords(Limit):
    name = "flagged_words"
    measures = "the share of words in the language's flagged-word list"
    reasons = ("flagged_words",)
    needs = "flagged"

    class Params(StepParams):
        max_flagged: float | None = Field(
            default=0.01, ge=0, le=1, description="most flagged words (share of words); languages without a list "
                                                 "skip it")

    def measure(self, doc: Doc) -> float:
        assert self.language.flagged is not None  # needs = "flagged"
        return self.language.word_list_ratio(doc.words, self.language.flagged)


class WordRepetition(Limit):
    name = "word_repetition"
    measures = "the share of word n-grams that occur more than once (n: word_repetition_n)"
    reasons = ("word_repetition",)
    class Params(StepParams):
        word_repetition_n: int = Field(default=5, ge=1, description="word n-gram length of the repetition ratio")
        max_word_repetition: float | None = Field(
            default=0.3, ge=0, le=1, description="most word n-grams that occur more than once (share of all)")

    p: Params

    def measure(self, doc: Doc) -> float:
        return word_repetition_ratio(doc.words, self.p.word_repetition_n)


class CharRepetition(Limit):
    name = "char_repetition"
    measures = "the share of character n-grams covered by the sqrt(#distinct) most frequent repeated ones " \
               "(n: char_repetition_n)"
    reasons = ("char_repetition",)
    class Params(StepParams):
        char_repetition_n: int = Field(default=10, ge=1, description="character n-gram length of the repetition "
                                                                     "ratio")
        max_char_repetition: float | None = Field(
            default=0.2, ge=0, le=1, description="most of the text covered by its sqrt(#distinct) most frequent "
                                                 "repeated character n-grams (ROOTS character repetition ratio)")

    p: Params

    def measure(self, doc: Doc) -> float:
        return char_repetition_ratio(doc.cp, self.p.char_repetition_n)


class LanguageId(Limit):
    name = "lang_id"
    measures = "fastText's probability of the document's own language when it is the top label (lang_id.model)"
    reasons = ("lang_id",)
    needs = "lang_id"

    class Params(StepParams):
        min_lang_id_score: float | None = Field(
            default=0.7, ge=0, le=1, description="least fastText probability of the document's own language")

    def measure(self, doc: Doc) -> float:
        assert self.language.lang_id is not None  # needs = "lang_id"
        return self.language.lang_id.score(doc.text, doc.lang or "")


class Perplexity(Limit):
    name = "perplexity"
    measures = "KenLM perplexity of the document, line by line (perplexity.models)"
    reasons = ("perplexity",)
    needs = "kenlm"

    class Params(StepParams):
        max_perplexity: float | None = Field(default=10_000, gt=0, description="highest KenLM perplexity")

    def measure(self, doc: Doc) -> float:
        return perplexity(self.language.kenlm, doc.text, self.language.sentencepiece)
