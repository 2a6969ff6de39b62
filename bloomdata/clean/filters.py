"""ROOTS-style quality filters: the measures, and the per-language check that names why a document goes.

The measures follow BigScience's ROOTS filtering (github.com/bigscience-workshop/data-preparation,
preprocessing/training/01b_oscar_cleaning_and_filtering/filtering.py), on word units
(``bloomdata.clean.text``) so that scripts without spaces are measured per character:

- character repetition: of the document's character n-grams, the share covered by its ``int(sqrt(#distinct))``
  most frequent ones that occur more than once (ROOTS's ``compute_character_repetition_ratio``);
- word repetition: the share of word n-grams that occur more than once;
- special characters: the share of characters that are punctuation, symbols, numbers or spaces (Unicode
  categories P, S, N, Z; ROOTS listed them by hand);
- closed-class and flagged words: the share of words in the language's list.

Checks run cheapest first and stop at the first failure, whose name is the reason (``FILTER_REASONS``).
Why not datatrove's filters: its Gopher/C4/FineWeb filters measure different things (no ROOTS ratios), and
their word tokenizers come from spaCy (not installed, and per language: Chinese needs jieba) or fall back to
whitespace, which makes a Chinese document one word. Character n-grams are counted with numpy (a rolling
64-bit polynomial hash of the code points and ``np.unique``): ~4x faster than a Counter of substrings.
"""

from __future__ import annotations

import collections
import functools

import numpy as np

from bloomdata.clean.closed_class import CLOSED_CLASS_WORDS
from bloomdata.clean.config import CleanConfig, QualityConfig, Thresholds
from bloomdata.clean.models import LangId, perplexity, perplexity_model
from bloomdata.clean.text import code_points, special_table
from bloomdata.errors import BloomstackError

_POLY = np.uint64(0x100000001B3)  # FNV-1 64-bit prime: odd, so every step is a bijection mod 2**64


def char_repetition_ratio(cp: np.ndarray, n: int) -> float:
    """ROOTS's character repetition ratio of a document given as uint32 code points."""
    m = len(cp) - n + 1
    if m <= 0:
        return 0.0
    h = cp[:m].astype(np.uint64)
    for k in range(1, n):  # h[i] = sum_k cp[i + k] * P**(n - 1 - k) mod 2**64: one value per n-gram
        h *= _POLY
        h += cp[k:k + m]
    h.sort()  # then the run lengths of equal values: np.unique's work without its extra arrays
    counts = np.diff(np.concatenate(([-1], np.flatnonzero(h[1:] != h[:-1]), [m - 1])))
    repeated = counts[counts > 1]
    top = min(int(np.sqrt(len(counts))), len(repeated))
    if top == 0:
        return 0.0
    return float(np.partition(repeated, len(repeated) - top)[-top:].sum()) / m


def word_repetition_ratio(words: list[str], n: int) -> float:
    """Share of word n-grams that occur more than once (ROOTS's word repetition ratio)."""
    if len(words) < n:
        return 0.0
    counts = collections.Counter(zip(*(words[k:] for k in range(n))))
    repeated = sum(c for c in counts.values() if c > 1)
    return repeated / (len(words) - n + 1)


def special_ratio(cp: np.ndarray) -> float:
    return float(np.count_nonzero(special_table()[cp])) / len(cp) if len(cp) else 0.0


def word_ratio(words: list[str], vocabulary: frozenset[str]) -> float:
    return sum(map(vocabulary.__contains__, words)) / len(words) if words else 0.0


def base_lang(lang: str | None) -> str:
    """``zh`` of ``zh-Hans`` / ``zh_Hans``: word lists and models fall back to it."""
    return (lang or "").replace("_", "-").split("-")[0]


class _Language:
    """One language's thresholds, word lists and models, resolved once per shard."""

    def __init__(self, lang: str | None, config: CleanConfig, closed: dict[str, list[str]],
                 flagged: dict[str, list[str]], lang_id: LangId | None):
        self.lang = lang
        self.t: Thresholds = config.quality.thresholds_for(lang)
        self.closed = _lookup(closed, lang)
        self.flagged = _lookup(flagged, lang)
        self.lang_id = lang_id if lang else None
        model = config.perplexity.models.get(lang or "") or config.perplexity.models.get(base_lang(lang))
        self.kenlm = perplexity_model(model) if model else None


def _lookup(lists: dict[str, list[str]], lang: str | None) -> frozenset[str] | None:
    words = lists.get(lang or "") or lists.get(base_lang(lang))
    return frozenset(words) if words else None


class QualityFilter:
    """``reason(text, words, lang)``: the first failed check, or None when the document is kept."""

    def __init__(self, config: CleanConfig, closed: dict[str, list[str]], flagged: dict[str, list[str]]):
        self.config = config
        self.closed, self.flagged = closed, flagged
        self.lang_id = LangId(config.lang_id) if config.lang_id.model else None
        self.quality = config.quality.enabled
        self._language = functools.lru_cache(maxsize=256)(self._resolve)

    def _resolve(self, lang: str | None) -> _Language:
        return _Language(lang, self.config, self.closed, self.flagged, self.lang_id)

    def reason(self, text: str, words: list[str], lang: str | None) -> str | None:
        if not text:
            return "empty"
        language = self._language(lang)
        t = language.t
        if self.quality:
            if t.min_words is not None and len(words) < t.min_words:
                return "too_few_words"
            if t.max_words is not None and len(words) > t.max_words:
                return "too_many_words"
            if t.min_chars is not None and len(text) < t.min_chars:
                return "too_few_chars"
            if t.max_chars is not None and len(text) > t.max_chars:
                return "too_many_chars"
            cp = code_points(text)
            if t.max_special_chars is not None and special_ratio(cp) > t.max_special_chars:
                return "special_characters"
            if language.closed and t.min_closed_class is not None and \
                    word_ratio(words, language.closed) < t.min_closed_class:
                return "closed_class_words"
            if language.flagged and t.max_flagged is not None and word_ratio(words, language.flagged) > t.max_flagged:
                return "flagged_words"
            if t.max_word_repetition is not None and \
                    word_repetition_ratio(words, t.word_repetition_n) > t.max_word_repetition:
                return "word_repetition"
            if t.max_char_repetition is not None and \
                    char_repetition_ratio(cp, t.char_repetition_n) > t.max_char_repetition:
                return "char_repetition"
        if language.lang_id is not None and t.min_lang_id_score is not None and \
                language.lang_id.score(text, lang) < t.min_lang_id_score:
            return "lang_id"
        if language.kenlm is not None and t.max_perplexity is not None and \
                perplexity(language.kenlm, text) > t.max_perplexity:
            return "perplexity"
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
    """(closed-class, flagged) word lists per language: the shipped closed-class lists unless switched off,
    replaced per language by the configured ones; flagged words only as configured."""
    closed = {lang: sorted(words) for lang, words in CLOSED_CLASS_WORDS.items()} \
        if quality.builtin_closed_class_words else {}
    closed.update({lang: _words(v, f"quality.closed_class_words.{lang}") for lang, v in quality.closed_class_words.items()})
    flagged = {lang: _words(v, f"quality.flagged_words.{lang}") for lang, v in quality.flagged_words.items()}
    return closed, flagged
