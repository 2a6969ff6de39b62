"""The language models of the optional model-based filters: fastText (language id), KenLM (perplexity) and
sentencepiece (words and perplexity of the languages ROOTS tokenised).

The models are the user's: the steps are off until a model path is given. ``fasttext``, ``kenlm`` and
``sentencepiece`` are not dependencies of bloomstack (native builds, and most users never turn these steps on):
they are imported when a model is configured, and a missing package or file is one ``BloomstackError`` line with the
fix, raised by ``check_models`` in the driver before anything is written. Models load once per worker process
(``functools.lru_cache`` keyed by path, size and mtime, so a replaced file is reloaded).

Scores follow ROOTS (bigscience-workshop/data-preparation, preprocessing/training/
01b_oscar_cleaning_and_filtering/filtering.py):

- language id: fastText's top label for the lower-cased text on one line must be the document's language
  and its probability at least ``min_lang_id_score``; documents without a language skip the check;
- perplexity: ``10 ** (-sum(log10 P(line)) / sum(words(line) + 1))`` over the lines, with KenLM's sentence
  boundaries, at most ``max_perplexity``. The model must have been trained on text split the same way
  (whitespace-separated words); ROOTS's models expected sentencepiece pieces, so tokenize such text first.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
from types import ModuleType
from typing import Any, Protocol, TypeVar, cast

from bloomdata.clean.sections import LangIdConfig, PerplexityConfig, SentencePieceConfig
from bloomdata.clean.text import roots_strip_words, roots_tables
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError

INSTALL_HINT = {"fasttext": "pip install fasttext-numpy2-wheel (or fasttext)",
                "kenlm": "pip install 'bloomstack[kenlm]' (kenlm builds from source: g++ and python3-dev)",
                "sentencepiece": "pip install sentencepiece"}


def require_package(name: str, setting: str) -> ModuleType:
    """Import an optional package, or fail with one line saying how to install it or turn the step off."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise BloomstackError(f"{setting} needs the {name} package, which is not installed: "
                              f"{INSTALL_HINT[name]}, or unset {setting}") from None


def require_file(path: str, setting: str, what: str) -> str:
    """The absolute path of a model file that exists (workers may run in another directory)."""
    if not os.path.isfile(path):
        raise BloomstackError(f"{path}: {what} not found ({setting}); give the path of an existing file or "
                              f"unset {setting}")
    return os.path.abspath(path)


class _WithModels(Protocol):
    """What ``check_models`` reads of a ``CleanConfig``: its model sections."""

    @property
    def lang_id(self) -> LangIdConfig: ...
    @property
    def perplexity(self) -> PerplexityConfig: ...
    @property
    def sentencepiece(self) -> SentencePieceConfig: ...


C = TypeVar("C", bound=_WithModels)


def check_models(config: C) -> C:
    """``config`` with absolute model paths, after checking each file exists and its package imports."""
    update: dict[str, Any] = {}
    if config.lang_id.model is not None:
        path = require_file(config.lang_id.model, "lang_id.model", "fastText language-id model")
        require_package("fasttext", "lang_id.model")
        update["lang_id"] = derive(config.lang_id, model=path)
    if config.perplexity.models:
        models = {lang: require_file(path, f"perplexity.models.{lang}", "KenLM model")
                  for lang, path in config.perplexity.models.items()}
        require_package("kenlm", "perplexity.models")
        update["perplexity"] = derive(config.perplexity, models=models)
    if config.sentencepiece.models:
        models = {lang: require_file(path, f"sentencepiece.models.{lang}", "sentencepiece model")
                  for lang, path in config.sentencepiece.models.items()}
        require_package("sentencepiece", "sentencepiece.models")
        update["sentencepiece"] = derive(config.sentencepiece, models=models)
    return cast(C, derive(cast(Any, config), **update))


def model_identity(path: str) -> dict[str, int | str]:
    """What a key records of a model file: a changed file is a different model."""
    st = os.stat(path)
    return {"path": path, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


@functools.lru_cache(maxsize=4)
def _fasttext(path: str, size: int, mtime_ns: int):
    return require_package("fasttext", "lang_id.model").load_model(path)


@functools.lru_cache(maxsize=64)
def _kenlm(path: str, size: int, mtime_ns: int):
    return require_package("kenlm", "perplexity.models").Model(path)


class LangId:
    """fastText language identification of one document against its declared language."""

    def __init__(self, config: LangIdConfig):
        assert config.model is not None  # built only when a model is given
        identity = model_identity(config.model)
        self.model = _fasttext(config.model, identity["size"], identity["mtime_ns"])
        self.config = config

    def label(self, lang: str) -> str:
        base = lang.replace("_", "-").split("-")[0]
        return (self.config.labels.get(lang) or self.config.labels.get(base)
                or self.config.label_format.format(lang=lang))

    def score(self, text: str, lang: str) -> float:
        """The probability of ``lang`` when it is the top prediction, else 0."""
        labels, probs = self.model.predict(text.lower().replace("\n", " "), k=1)
        return float(probs[0]) if labels and labels[0] == self.label(lang) else 0.0


def perplexity_model(path: str):
    identity = model_identity(path)
    return _kenlm(path, identity["size"], identity["mtime_ns"])


@functools.lru_cache(maxsize=64)
def _sentencepiece(path: str, size: int, mtime_ns: int):
    processor = require_package("sentencepiece", "sentencepiece.models").SentencePieceProcessor()
    processor.load(path)
    return processor


def sentencepiece_model(path: str):
    identity = model_identity(path)
    return _sentencepiece(path, identity["size"], identity["mtime_ns"])


_NON_PRINTING = re.compile("[" + "".join(map(chr, [*range(0, 32), *range(127, 160)])) + "]")
_DIGIT = re.compile(r"\d")


def roots_normalization(text: str, lower: bool) -> str:
    """ROOTS's normalization before sentencepiece (filtering.py ``ModifyingDocuments.normalization`` with
    non-printing characters removed, the text stripped, whitespace made uniform, digits made 0 and unicode
    punctuation replaced; lower-cased for words, not for perplexity)."""
    text = _NON_PRINTING.sub("", text).strip()
    if not text:
        return text
    if lower:
        text = text.lower()
    whitespace, punctuation = roots_tables()
    return _DIGIT.sub("0", text.translate(whitespace)).translate(punctuation)


def sentencepiece_words(model, text: str) -> list[str]:
    """ROOTS's words with a sentencepiece model (zh): the pieces of the normalized lower-cased text,
    stripped of ROOTS's special characters."""
    pieces = model.encode_as_pieces(roots_normalization(text, lower=True))
    return roots_strip_words([p.lower() for p in pieces])


def perplexity(model, text: str, sentencepiece=None) -> float:
    """KenLM perplexity of a document, line by line (ROOTS's formula). With the language's sentencepiece
    model, as ROOTS scored: the normalized text (digits 0, punctuation replaced) as space-joined pieces,
    and the score rounded to 0.1."""
    if sentencepiece is not None:
        text = " ".join(sentencepiece.encode_as_pieces(roots_normalization(text, lower=False)))
    log10, length = 0.0, 0
    for line in text.split("\n"):
        log10 += model.score(line, bos=True, eos=True)
        length += len(line.split()) + 1
    score = 10.0 ** (-log10 / length)
    return round(score, 1) if sentencepiece is not None else score
