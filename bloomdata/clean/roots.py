"""BigScience's ROOTS filtering data, shipped as data files in ``bloomdata/clean/roots_data/``.

Source: github.com/bigscience-workshop/data-preparation at commit 9d0588419073cc5bf0fb92b58f37f2a1016572c3,
``preprocessing/training/01b_oscar_cleaning_and_filtering/`` (Apache-2.0; each file's ``source`` field names
its path): ``stopwords.json`` and ``flagged_words.json`` (the lists of ROOTS's 13 OSCAR languages, as
published: not lower-cased, so an entry with a capital, such as id "Anda", never matches, as in ROOTS),
``characters.json`` (``special_characters_default``, which ROOTS both strips words of and counts as special
characters, with the one-character keys of emoji 1.6.1 that it included; the whitespace characters of its
``uniform_whitespace``; its ``unicode_punctuation`` map) and ``parameters_filtering.json`` (every parameter
of every language, the record ``configs/clean/roots.yaml`` is written from and tested against).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

LANGUAGES = ("ar", "bn", "ca", "en", "es", "eu", "fr", "hi", "id", "pt", "ur", "vi", "zh")


@functools.cache
def load(name: str) -> dict[str, Any]:
    """One data file of ``roots_data`` (``stopwords``, ``flagged_words``, ``characters``,
    ``parameters_filtering``)."""
    text = resources.files("bloomdata.clean").joinpath("roots_data", f"{name}.json").read_text(encoding="utf-8")
    return json.loads(text)


def stopwords() -> dict[str, list[str]]:
    return load("stopwords")["words"]


def flagged_words() -> dict[str, list[str]]:
    return load("flagged_words")["words"]


def special_characters() -> str:
    """ROOTS's ``special_characters_default`` (its one-character members), as one string."""
    return load("characters")["special_characters"]


def uniform_whitespace() -> str:
    return load("characters")["uniform_whitespace"]


def unicode_punctuation() -> dict[str, str]:
    return load("characters")["unicode_punctuation"]
