"""The quality filters of a clean run: each language's settings resolved once, and the steps run in order.

``QualityFilter.document(text, lang)`` applies the document modifications (``normalize``, then ROOTS's
per-language word removals when set) and returns a ``Doc``; ``QualityFilter.reason(doc)`` runs the
language's steps (``bloomdata.clean.steps``) in ``quality.steps`` order and returns the first reason to
remove it, or None. Two ways of finding words (``quality.words``):

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

import functools
from collections.abc import Callable

import numpy as np

from bloomdata.clean import roots
from bloomdata.clean.closed_class import CLOSED_CLASS_WORDS
from bloomdata.clean.config import CleanConfig, QualityConfig, Thresholds
from bloomdata.clean.measures import char_repetition_ratio, special_ratio, word_ratio, word_repetition_ratio
from bloomdata.clean.models import LangId, perplexity_model, sentencepiece_model
from bloomdata.clean.steps import FILTERS, Doc, Filter
from bloomdata.clean.text import (
    CASE_SENSITIVE,
    normalize,
    roots_remove_words,
    roots_special_table,
    roots_words,
    special_table,
    word_units,
)
from bloomdata.errors import BloomstackError

__all__ = ["Doc", "Language", "QualityFilter", "char_repetition_ratio", "load_word_lists", "special_ratio",
           "word_ratio", "word_repetition_ratio"]


def base_lang(lang: str | None) -> str:
    """``zh`` of ``zh-Hans`` / ``zh_Hans``: word lists and models fall back to it."""
    return (lang or "").replace("_", "-").split("-")[0]


def _lookup(table: dict[str, str], lang: str | None) -> str | None:
    return table.get(lang or "") or table.get(base_lang(lang))


class Language:
    """One language's settings, word lists, models and word rule, resolved once per process."""

    def __init__(self, lang: str | None, config: CleanConfig, closed: dict[str, list[str]],
                 flagged: dict[str, list[str]], lang_id: LangId | None):
        self.lang = lang
        self.t: Thresholds = config.quality.thresholds_for(lang)
        self.closed = _word_set(closed, lang)
        self.flagged = _word_set(flagged, lang)
        self.lang_id = lang_id if lang else None
        model = _lookup(config.perplexity.models, lang)
        self.kenlm = perplexity_model(model) if model else None
        sp = _lookup(config.sentencepiece.models, lang)
        self.sentencepiece = sentencepiece_model(sp) if sp else None
        self.roots = config.quality.words == "roots"
        self.special: np.ndarray = roots_special_table() if config.quality.special_characters == "roots" \
            else special_table()
        self.augmentation = tuple(self.t.word_augmentation)
        self.words: Callable[[Doc], list[str]] = self._word_rule()
        self.remove = bool(self.t.remove_words_containing) or self.t.max_word_length is not None
        self.steps: list[Filter] = [s for s in (FILTERS[name].build(self) for name in config.quality.steps
                                                if config.quality.enabled or name in ("lang_id", "perplexity"))
                                    if s is not None]

    def _word_rule(self) -> Callable[[Doc], list[str]]:
        if not self.roots:
            return lambda doc: word_units(doc.text)
        if self.t.sentencepiece_words and self.sentencepiece is not None:
            from bloomdata.clean.models import sentencepiece_words

            return lambda doc: sentencepiece_words(self.sentencepiece, doc.text)
        per_character = self.t.sentencepiece_words
        return lambda doc: roots_words(doc.text, per_character, flags=doc.flags)

    def word_count(self, doc: Doc) -> int:
        """ROOTS counts words stripped but not lower-cased; that differs from ``len(words)`` only for a
        document holding a character whose lower case strips differently."""
        if not self.roots or (self.t.sentencepiece_words and self.sentencepiece is not None) \
                or not doc.flags & CASE_SENSITIVE:
            return len(doc.words)
        return len(roots_words(doc.text, per_character=self.t.sentencepiece_words, lower=False, flags=doc.flags))

    def word_list_ratio(self, words: list[str], vocabulary: frozenset[str]) -> float:
        return word_ratio(words, vocabulary, self.augmentation, self.t.augmentation_join)

    def modify(self, text: str) -> str:
        """ROOTS's per-language word removals (long words, words with URL parts), when set."""
        if not self.remove or not text:
            return text
        return roots_remove_words(text, self.t.remove_words_containing, self.t.max_word_length)


def _word_set(lists: dict[str, list[str]], lang: str | None) -> frozenset[str] | None:
    words = lists.get(lang or "") or lists.get(base_lang(lang))
    return frozenset(words) if words else None


class QualityFilter:
    """``document(text, lang)``: the modified document; ``reason(doc)``: the first failed step, or None."""

    def __init__(self, config: CleanConfig, closed: dict[str, list[str]], flagged: dict[str, list[str]]):
        self.config = config
        self.closed, self.flagged = closed, flagged
        self.lang_id = LangId(config.lang_id) if config.lang_id.model else None
        self.language = functools.lru_cache(maxsize=256)(self._resolve)

    def _resolve(self, lang: str | None) -> Language:
        return Language(lang, self.config, self.closed, self.flagged, self.lang_id)

    def document(self, text: str, lang: str | None) -> Doc:
        """The document after normalization and its language's word removals."""
        language = self.language(lang)
        return Doc(language.modify(normalize(text, self.config.normalize)), lang, language)

    def check(self, text: str, lang: str | None) -> str | None:
        """The reason to remove ``text`` (as read), or None."""
        return self.reason(self.document(text, lang))

    def reason(self, doc: Doc) -> str | None:
        if not doc.text:
            return "empty"
        for step in doc.language.steps:
            verdict = step.keep(doc)
            if verdict is not True:
                return verdict if isinstance(verdict, str) else step.reasons[0]
        return None


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


def load_word_lists(quality: QualityConfig) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
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
    closed.update({lang: _words(v, f"quality.closed_class_words.{lang}") for lang, v in quality.closed_class_words.items()})
    flagged.update({lang: _words(v, f"quality.flagged_words.{lang}") for lang, v in quality.flagged_words.items()})
    return closed, flagged
