"""The shipped filters (``bloomdata.clean.steps.Filter``), one class each; ``bloomdata.clean.builtin`` lists them.

A filter is built once per language and asked ``keep(doc)`` for each document (see ``bloomdata.clean.steps``).
The measures are ROOTS's (bigscience-workshop/data-preparation, 01b_oscar_cleaning_and_filtering/filtering.py;
``bloomdata.clean.measures``); a ``Doc`` (``bloomdata.clean.language``) computes what several filters share
(words, code points) once, on first use.
"""

from __future__ import annotations

from pydantic import Field

from bloomdata.clean.lang_models import perplexity
from bloomdata.clean.language import Doc
from bloomdata.clean.measures import char_repetition_ratio, special_ratio, word_repetition_ratio
from bloomdata.clean.sections import StepParams
from bloomdata.clean.steps import Limit, Range


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
        return special_ratio(doc.code_points, self.language.special)


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

    params: Params

    def measure(self, doc: Doc) -> float:
        return word_repetition_ratio(doc.words, self.params.word_repetition_n)


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

    params: Params

    def measure(self, doc: Doc) -> float:
        return char_repetition_ratio(doc.code_points, self.params.char_repetition_n)


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
