"""One language as the steps see it: its settings, word lists, models and word rule (``Language``),
and one document of it (``Doc``).

Two ways of finding words (``quality.words``):

- ``units`` (the default preset): word units (``bloomdata.clean.text.word_units``: a word, or one character of
  an unspaced script, lower-cased, stripped of punctuation and digits), so one set of thresholds fits every
  script; special characters are Unicode categories (P, S, N, Z, controls);
- ``roots`` (the roots preset): ROOTS's rule, value by value: pieces between spaces, tabs and newlines,
  lower-cased, stripped of ROOTS's ``special_characters_default`` (which, unlike a category rule, holds
  Devanagari and Bengali vowel signs such as U+093E, U+09BE, U+0940, U+094D, U+0947, and the emoji);
  languages with ``sentencepiece_words`` (zh) take the pieces of their sentencepiece model when one is
  given, else one word per character. Its word count is ROOTS's: stripped but not lower-cased.

Why not datatrove's filters: its Gopher/C4/FineWeb filters measure different things (no ROOTS ratios), and
their word tokenizers come from spaCy (not installed, and per language: Chinese needs jieba) or fall back to
whitespace, which makes a Chinese document one word.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Protocol

import numpy as np

from bloomdata.clean import roots
from bloomdata.clean.closed_class import CLOSED_CLASS_WORDS
from bloomdata.clean.lang_models import LangId, sentencepiece_words
from bloomdata.clean.measures import word_ratio
from bloomdata.clean.sections import LanguageSettings
from bloomdata.clean.text import CASE_SENSITIVE, code_points, roots_flags, roots_words, word_units
from bloomdata.errors import BloomstackError


def base_lang(lang: str | None) -> str:
    """``zh`` of ``zh-Hans`` / ``zh_Hans``: word lists and models fall back to it."""
    return (lang or "").replace("_", "-").split("-")[0]


def lookup(table: dict[str, Any], lang: str | None) -> Any:
    """``table``'s entry for ``lang``, else for its base language (None without either)."""
    return table.get(lang or "") or table.get(base_lang(lang))


@dataclass(eq=False)
class Language:
    """One language as the steps see it: its settings, word lists, models and word rule, resolved once per
    process (``bloomdata.clean.quality_filter.QualityFilter.language``)."""

    lang: str | None
    settings: LanguageSettings
    _: KW_ONLY
    special: np.ndarray  # bool[0x110000]: the special characters
    closed: frozenset[str] | None = None  # word lists (None: the language has none)
    flagged: frozenset[str] | None = None
    lang_id: LangId | None = None
    kenlm: Any = None  # models (None: not given for this language)
    sentencepiece: Any = None
    roots: bool = False  # ROOTS's word rule (quality.words: roots) instead of word units
    augmentation: tuple[int, ...] = field(init=False)
    words: Callable[[Doc], list[str]] = field(init=False)

    def __post_init__(self) -> None:
        if not self.lang:
            self.lang_id = None
        self.augmentation = tuple(self.settings.word_augmentation)
        self.words = self._word_rule()

    def _word_rule(self) -> Callable[[Doc], list[str]]:
        if not self.roots:
            return lambda doc: word_units(doc.text)
        if self.settings.sentencepiece_words and self.sentencepiece is not None:
            return lambda doc: sentencepiece_words(self.sentencepiece, doc.text)
        per_character = self.settings.sentencepiece_words
        return lambda doc: roots_words(doc.text, per_character, flags=doc.flags)

    def word_count(self, doc: Doc) -> int:
        """ROOTS counts words stripped but not lower-cased; that differs from ``len(words)`` only for a
        document holding a character whose lower case strips differently."""
        per_character = self.settings.sentencepiece_words
        if not self.roots or (per_character and self.sentencepiece is not None) or not doc.flags & CASE_SENSITIVE:
            return len(doc.words)
        return len(roots_words(doc.text, per_character=per_character, lower=False, flags=doc.flags))

    def word_list_ratio(self, words: list[str], vocabulary: frozenset[str]) -> float:
        return word_ratio(words, vocabulary, self.augmentation, self.settings.augmentation_join)


class Doc:
    """One document as the steps see it: its text (changed in place by each modifier), its language, and the
    views the measures share, each computed on first use and dropped when the text changes."""

    __slots__ = ("_text", "lang", "language", "_words", "_code_points", "_count", "_flags")

    def __init__(self, text: str, lang: str | None, language: Language):
        self.lang, self.language = lang, language
        self._set(text)

    def _set(self, text: str) -> None:
        self._text = text
        self._words: list[str] | None = None
        self._code_points: np.ndarray | None = None
        self._count: int | None = None
        self._flags: int | None = None

    @property
    def text(self) -> str:
        return self._text

    @text.setter
    def text(self, text: str) -> None:
        """A modifier's result: the views computed so far are dropped when it changed the text."""
        if text != self._text:
            self._set(text)

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
            self._flags = roots_flags(self.code_points)
        return self._flags

    @property
    def code_points(self) -> np.ndarray:
        """The text's code points (``bloomdata.clean.text.code_points``)."""
        if self._code_points is None:
            self._code_points = code_points(self.text)
        return self._code_points


def word_set(lists: dict[str, list[str]], lang: str | None) -> frozenset[str] | None:
    """The word list of ``lang`` (or of its base language) as a set; None when it has none."""
    words = lists.get(lang or "") or lists.get(base_lang(lang))
    return frozenset(words) if words else None


def _words(value: list[str] | str, setting: str) -> list[str]:
    """A word list given inline or as a file (one word per line, '#' comments), lower-cased like units."""
    if isinstance(value, str):
        try:
            with open(value, encoding="utf-8") as f:
                value = [line.split("#")[0] for line in f]
        except (OSError, UnicodeDecodeError) as exc:
            raise BloomstackError(f"{value}: cannot read the word list of {setting} ({exc}); give a UTF-8 file "
                                  "with one word per line") from None
    return sorted({w.strip().lower() for w in value if w.strip()})


class WordListSettings(Protocol):
    """What ``load_word_lists`` reads of ``QualityConfig``."""

    @property
    def builtin_closed_class_words(self) -> bool: ...
    @property
    def word_lists(self) -> str: ...
    @property
    def closed_class_words(self) -> dict[str, list[str] | str]: ...
    @property
    def flagged_words(self) -> dict[str, list[str] | str]: ...


def load_word_lists(quality: WordListSettings) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """(closed-class, flagged) word lists per language: the shipped lists of ``quality.word_lists`` unless
    ``builtin_closed_class_words`` is off, replaced per language by the configured ones. ROOTS's lists are
    taken as published (not lower-cased, spaced entries kept: they match augmentation runs)."""
    closed: dict[str, list[str]] = {}
    flagged: dict[str, list[str]] = {}
    if quality.builtin_closed_class_words:
        closed = {lang: sorted(words) for lang, words in CLOSED_CLASS_WORDS.items()}
        if quality.word_lists == "roots":
            closed.update({lang: sorted(set(words)) for lang, words in roots.stopwords().items()})
            flagged = {lang: sorted(set(words)) for lang, words in roots.flagged_words().items()}
    closed.update({lang: _words(v, f"quality.closed_class_words.{lang}")
                   for lang, v in quality.closed_class_words.items()})
    flagged.update({lang: _words(v, f"quality.flagged_words.{lang}") for lang, v in quality.flagged_words.items()})
    return closed, flagged
