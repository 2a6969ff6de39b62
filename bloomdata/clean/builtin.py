"""The shipped steps, in one place, and where each runs (``bloomdata.clean.steps``).

``quality.steps`` names the filters by their ``name`` (``BUILTIN_FILTERS``) and a user's steps of any kind as
``package.module:ClassName``; the modifiers and keyers listed here run for every document whatever it lists,
each switched by its section's ``enabled`` (``normalize``, ``pii``, ``exact_dedup``, ...) or, for
``RemoveWords``, by its per-language parameters.
"""

from __future__ import annotations

from bloomdata.clean.filters import (
    Bytes,
    CharRepetition,
    Chars,
    ClosedClassWords,
    FlaggedWords,
    LanguageId,
    Perplexity,
    SpaceWords,
    SpecialCharacters,
    WordRepetition,
    Words,
)
from bloomdata.clean.keyers import ExactKeys, MinHashKeys, SimHashKeys, TemplateLines
from bloomdata.clean.modifiers import Normalize, Redact, RemoveWords
from bloomdata.clean.steps import Filter, Keyer, Modifier, Step

FILTERS: tuple[type[Filter], ...] = (Words, Chars, Bytes, SpaceWords, SpecialCharacters, ClosedClassWords, FlaggedWords,
                                     WordRepetition, CharRepetition, LanguageId, Perplexity)
BUILTIN_FILTERS: dict[str, type[Filter]] = {cls.name: cls for cls in FILTERS}  # what quality.steps names
BEFORE_FILTERS: tuple[type[Modifier], ...] = (Normalize, RemoveWords)  # every document, first
AFTER_FILTERS: tuple[type[Modifier], ...] = (Redact,)  # every document that passed the filters
KEYERS: tuple[type[Keyer], ...] = (ExactKeys, MinHashKeys, SimHashKeys, TemplateLines)  # before a user's keyers
# run even with quality.enabled off: they run only with a model given
MODEL_FILTERS: tuple[type[Filter], ...] = (LanguageId, Perplexity)
# the built-in steps whose parameters are per-language settings
PER_LANGUAGE: tuple[type[Step], ...] = (RemoveWords, *FILTERS)
