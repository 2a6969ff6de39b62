"""Text normalization and word units: what every clean step shares.

``normalize`` touches whitespace and control characters only (no Unicode normalization unless asked, as in
BLOOM's tokenizer, whose byte-level BPE has no normalizer): C0/C1 controls other than tab and newline and a
stray U+FEFF are dropped, except that a C1 control with a cp1252 meaning becomes that character
(``c1_as_cp1252``: web text decoded as Latin-1 instead of cp1252 carries U+0092 for ’, U+009C for œ...;
dropping them would join words, "l\u0092eau" -> "leau"), CRLF and CR become LF, U+2028/U+2029 become
LF, odd spaces (NBSP, U+2000-U+200A, U+202F, U+205F, U+3000) become a space, runs of spaces become one,
lines are stripped, 3+ newlines become two. Zero-width joiners and non-joiners (U+200C/D), which Indic and
Arabic-script spelling needs, are kept.

``word_units`` gives the "words" of the quality measures and the MinHash shingles. Splitting on whitespace
works for spaced scripts only: a Chinese, Japanese or Thai document is one "word" per sentence. So the rule
is per script, not per language (it holds for unseen languages and for mixed text):

- a character of a script written without spaces (Han, Hiragana, Katakana, Bopomofo, Thai, Lao, Khmer,
  Myanmar, Tibetan) is one unit;
- any other run of non-space characters is one unit;
- units are lower-cased and stripped of punctuation and digits at both ends (``STRIP``: ASCII, typographic
  quotes and dashes, CJK, Arabic and Devanagari punctuation; ROOTS strips its "special characters" the
  same way); units left empty are dropped, so numbers are not words.

So word counts, word n-gram repetition, closed-class and flagged-word ratios are character-based on
unspaced scripts, and one set of defaults fits every language. The cost: unspaced text has ~1.5-3x more
units than words; its thresholds are on characters, which is what ROOTS's Chinese settings approximated with
a sentencepiece tokenizer. Stripping with a short ``str.strip`` set runs at ~30 MB/s on tests/data/corpus;
mapping every Unicode punctuation character to a space first (``str.translate``) ran at ~15 MB/s.
"""

from __future__ import annotations

import functools
import itertools
import re
import string
import sys
import unicodedata

import numpy as np

from bloomdata.clean.sections import NormalizeConfig

# Scripts written without spaces between words (code point ranges; Han includes its extensions).
UNSPACED = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u0f00-\u0fff"  # Tibetan
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff\u19e0-\u19ff"  # Khmer
    "\u2e80-\u2fdf"  # CJK radicals, Kangxi radicals
    "\u3005-\u3007\u3021-\u3029\u3040-\u30ff\u3100-\u312f\u31a0-\u31ff"  # kana, bopomofo, ideographic marks
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han
    "\U00020000-\U0003134f"  # Han extensions B-G
)
_HAS_UNSPACED = re.compile(f"[{UNSPACED}]")
_UNITS = re.compile(f"[{UNSPACED}]|[^\\s{UNSPACED}]+")

_CONTROLS = [*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), *range(0x7F, 0xA0), 0xFEFF]
_SPACES = [0x09, 0xA0, 0x1680, *range(0x2000, 0x200B), 0x202F, 0x205F, 0x3000]
# What word units are stripped of at both ends (a short set: str.strip scans it for every end character).
STRIP = (string.punctuation + string.digits + "\u00a1\u00a7\u00ab\u00b0\u00b7\u00bb\u00bf\u2013\u2014\u2015"
         "\u2018\u2019\u201a\u201c\u201d\u201e\u2022\u2026\u2039\u203a\u20ac\u2116"  # Latin-1 and typographic
         "\u3001\u3002" + "".join(map(chr, range(0x3008, 0x3012))) + "\uff01\uff08\uff09\uff0c\uff1a\uff1b\uff1f"  # CJK
         "\u060c\u061b\u061f\u066a\u06d4\u0964\u0965")  # Arabic, Urdu, Devanagari
_ODD = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted({*_CONTROLS, *_SPACES, 0x0D, 0x2028, 0x2029})) + "]")
_MULTI_SPACE = re.compile(r" {2,}")
_LINE_EDGES = re.compile(r" ?\n ?")
_MANY_NEWLINES = re.compile(r"\n{3,}")


def _cp1252_of_c1() -> dict[int, str]:
    """The C1 controls (U+0080-U+009F) that stand for a cp1252 character (27 of 32; 5 are undefined there)."""
    out = {}
    for c in range(0x80, 0xA0):
        try:
            out[c] = bytes([c]).decode("cp1252")
        except UnicodeDecodeError:
            continue
    return out


@functools.lru_cache(maxsize=8)
def _table(controls: bool, whitespace: bool, c1_as_cp1252: bool = True) -> dict[int, str | None]:
    table: dict[int, str | None] = {}
    if controls:
        table.update(dict.fromkeys(_CONTROLS))
        if c1_as_cp1252:
            table.update(_cp1252_of_c1())
    if whitespace:
        table.update({c: " " for c in _SPACES})
        table.update({0x0D: "\n", 0x2028: "\n", 0x2029: "\n"})
    return table


def normalize(text: str, config: NormalizeConfig) -> str:
    """``text`` with whitespace and control characters normalized (see the module docstring)."""
    if not config.enabled:
        return text
    if config.unicode_form != "none":
        text = unicodedata.normalize(config.unicode_form, text)
    if config.whitespace and "\r" in text:
        text = text.replace("\r\n", "\n")
    if _ODD.search(text):  # most documents hold none: skip the per-character table lookups
        text = text.translate(_table(config.controls, config.whitespace, config.c1_as_cp1252))
    if config.whitespace:
        if "  " in text:
            text = _MULTI_SPACE.sub(" ", text)
        if " \n" in text or "\n " in text:
            text = _LINE_EDGES.sub("\n", text)
        if "\n\n\n" in text:
            text = _MANY_NEWLINES.sub("\n\n", text)
        text = text.strip()
    if config.roots_whitespace or config.roots_punctuation:
        text = roots_modify(text, config.roots_whitespace, config.roots_punctuation)
    return text


@functools.cache
def special_table() -> np.ndarray:
    """bool[0x110000]: code points that are punctuation, symbols, numbers, separators or controls (Unicode
    categories P*, S*, N*, Z*, Cc): ROOTS's "special characters" by category instead of a hand-made set,
    so every script's punctuation and digits count, and no letter of any script does."""
    table = np.zeros(sys.maxunicode + 1, dtype=bool)
    for cp in range(0x30000):  # beyond: unassigned planes, tags and private use
        category = unicodedata.category(chr(cp))
        table[cp] = category[0] in "PSNZ" or category == "Cc"
    return table


def code_points(text: str) -> np.ndarray:
    """uint32 code points of ``text`` (one pass in C)."""
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def word_units(text: str) -> list[str]:
    """The lower-cased word units of ``text`` (see the module docstring)."""
    lowered = text.lower()
    pieces = _UNITS.findall(lowered) if _HAS_UNSPACED.search(lowered) else lowered.split()
    return list(filter(None, map(str.strip, pieces, itertools.repeat(STRIP))))  # C loops: no frame per word


# --- ROOTS's text handling (the roots preset; bigscience-workshop/data-preparation, filtering.py) ----------


@functools.cache
def roots_tables() -> tuple[dict[int, str], dict[int, str]]:
    """(ROOTS's uniform_whitespace, its unicode_punctuation) as ``str.translate`` tables."""
    from bloomdata.clean import roots

    whitespace = dict.fromkeys(map(ord, roots.uniform_whitespace()), " ")
    punctuation = {ord(k): v for k, v in roots.unicode_punctuation().items()}
    return whitespace, punctuation


@functools.cache
def _roots_patterns() -> tuple[re.Pattern[str], ...]:
    """Patterns that find whether a table above has work (a translate is ~10x slower than a search)."""
    return tuple(re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(t) if t[c] != chr(c)) + "]")
                 for t in roots_tables())  # a space made a space is no work


def roots_modify(text: str, whitespace: bool, punctuation: bool) -> str:
    """ROOTS's document normalization before filtering: the document stripped (``str.strip``), then its
    odd whitespace characters made spaces and (optionally) its unicode punctuation replaced."""
    text = text.strip()
    if not text:
        return text
    tables, patterns = roots_tables(), _roots_patterns()
    if whitespace and patterns[0].search(text):
        text = text.translate(tables[0])
    if punctuation and patterns[1].search(text):
        text = text.translate(tables[1])
    return text


@functools.cache
def roots_strip_set() -> str:
    """ROOTS's ``special_characters_default`` as a ``str.strip`` argument."""
    from bloomdata.clean import roots

    return roots.special_characters()


@functools.cache
def roots_special_table() -> np.ndarray:
    """bool[0x110000]: the members of ROOTS's special character set (its special-characters ratio)."""
    table = np.zeros(sys.maxunicode + 1, dtype=bool)
    table[[ord(c) for c in roots_strip_set()]] = True
    return table


NON_LATIN1_STRIP, CASE_SENSITIVE = 1, 2  # bits of roots_classes


@functools.cache
def roots_classes() -> np.ndarray:
    """uint8[0x110000] of bits per code point: NON_LATIN1_STRIP, a member of ROOTS's set beyond Latin-1
    (a document without one strips its words with the 95 Latin-1 members, ~4x faster than with all 1,599);
    CASE_SENSITIVE, a character whose lower case strips differently (U+0413 "Г" is in ROOTS's set, "г" is
    not; "İ" lower-cases to two characters): in a document holding one, ROOTS's word count (not
    lower-cased) and its lower-cased words can differ."""
    strip = roots_strip_set()
    table = np.zeros(sys.maxunicode + 1, dtype=np.uint8)
    table[[ord(c) for c in strip if ord(c) > 0xFF]] |= NON_LATIN1_STRIP
    members = set(strip)
    for cp in range(0x20000):  # cased scripts live in the first two planes
        c = chr(cp)
        low = c.lower()
        if low != c and (len(low) != 1 or (c in members) != (low in members)):
            table[cp] |= CASE_SENSITIVE
    return table


def roots_flags(cp: np.ndarray) -> int:
    """The ``roots_classes`` bits present in a document given as code points."""
    return int(np.bitwise_or.reduce(roots_classes()[cp])) if len(cp) else 0


@functools.cache
def _latin1_strip() -> tuple[str, frozenset[str]]:
    strip = roots_strip_set()
    return "".join(c for c in strip if ord(c) <= 0xFF), frozenset(c for c in strip if ord(c) > 0xFF)


_OTHER_SPACE = re.compile(r"[^\S \n\t]")  # whitespace that str.split() splits on and ROOTS does not
_ROOTS_SEPARATORS = re.compile(r"[ \n\t]")


def roots_split(text: str) -> list[str]:
    """ROOTS's ``split_on_whitespace(new_line=True, tab=True)``: pieces between spaces, tabs and newlines."""
    if _OTHER_SPACE.search(text):
        return [w for w in _ROOTS_SEPARATORS.split(text) if w]
    return text.split()


def roots_strip_words(pieces: list[str], flags: int = NON_LATIN1_STRIP) -> list[str]:
    """Each piece stripped of ROOTS's special characters at both ends; empty ones dropped. ``flags``
    (``roots_flags`` of the text): without NON_LATIN1_STRIP only the Latin-1 members can be there."""
    latin1, beyond = _latin1_strip()
    stripped = list(map(str.strip, pieces, itertools.repeat(latin1)))
    if flags & NON_LATIN1_STRIP:  # strip further only the words that still end in a member beyond Latin-1
        full = roots_strip_set()
        stripped = [w.strip(full) if w and (w[0] in beyond or w[-1] in beyond) else w for w in stripped]
    return list(filter(None, stripped))


def roots_words(text: str, per_character: bool = False, lower: bool = True, flags: int = NON_LATIN1_STRIP) -> list[str]:
    """ROOTS's ``get_words_from_document`` without a sentencepiece model; ``per_character``: one word per
    character of an unspaced script (zh without its sentencepiece model)."""
    lowered = text.lower() if lower else text
    if per_character and _HAS_UNSPACED.search(lowered):
        return roots_strip_words(_UNITS.findall(lowered), flags)
    return roots_strip_words(roots_split(lowered), flags)


def _keep_word(word: str, containing: list[str] | None, max_length: int | None) -> bool:
    """ROOTS's should_keep_word_with_incorrect_substrings and should_keep_long_word, in that order."""
    if containing or (max_length is not None and len(word) > max_length):
        stripped = word.strip(roots_strip_set())
        if containing and any(s in stripped for s in containing):
            return False
        if max_length is not None and len(word) > max_length and not (stripped and len(stripped) <= max_length):
            return False
    return True


def roots_remove_words(text: str, containing: list[str] | None, max_length: int | None) -> str:
    """ROOTS's remove_words_with_incorrect_substrings then remove_long_words: the text split into lines, tab
    fields and space-separated words, the words dropped, and joined again without empty words, fields or
    lines (so runs of spaces become one, as ROOTS's split and merge did, whether or not a word goes)."""
    containing = [s for s in containing or () if s in text] or None  # a substring absent from the text drops nothing
    lines = []
    for line in text.split("\n"):
        fields = []
        for field in line.split("\t"):
            words = [w for w in field.split(" ") if w]
            if containing or (max_length is not None and words and max(map(len, words)) > max_length):
                words = [w for w in words if _keep_word(w, containing, max_length)]
            if words:
                fields.append(" ".join(words))
        if fields:
            lines.append("\t".join(fields))
    return "\n".join(lines)
