"""Cleaning steps written outside the package, as a user writes them: one class each, named in a clean config
as ``tests.bloomdata.clean_user_steps:ClassName`` (importable on Dask workers: the repository is their
working directory). Used by tests/bloomdata/test_clean.py and test_clean_user_steps.py."""

from __future__ import annotations

import xxhash
from pydantic import Field

from bloomdata.clean.language import Doc
from bloomdata.clean.steps import Keyer, Limit, Modifier, StepParams


class Digits(Limit):
    """A filter: too many ASCII digits."""

    name = "digits"
    measures = "the share of characters that are ASCII digits"
    reasons = ("too_many_digits",)

    class Params(StepParams):
        max_digits: float | None = Field(default=0.2, ge=0, le=1, description="most ASCII digits (share)")

    def measure(self, doc: Doc) -> float:
        return sum(c in "0123456789" for c in doc.text) / len(doc.text)


class DropLines(Modifier):
    """A modifier: lines that start with ``drop_prefix`` leave the text."""

    name = "drop_lines"

    class Params(StepParams):
        drop_prefix: str = Field(default="Advertisement:", min_length=1, description="what a dropped line starts with")

    params: Params

    def modify(self, doc: Doc) -> str:
        prefix = self.params.drop_prefix
        return "\n".join(line for line in doc.text.split("\n") if not line.startswith(prefix))


class Opening(Keyer):
    """A keyer: documents that open with the same words (case-folded) are duplicates."""

    name = "opening"
    reason = "same_opening"

    class Params(StepParams):
        opening_words: int = Field(default=6, ge=1, description="words compared at the start of a document")

    params: Params

    def key(self, doc: Doc) -> int | None:
        words = doc.text.casefold().split()
        if len(words) < self.params.opening_words:
            return None
        return xxhash.xxh3_64_intdigest(" ".join(words[:self.params.opening_words]).encode())


class WordsPerLine(Limit):
    """A filter sharing a parameter name with the built-in ``words``: ``min_words`` a line on average."""

    name = "words_per_line"
    measures = "the words of the document per line"
    reasons = ("short_lines",)

    class Params(StepParams):
        min_words: int | None = Field(default=10, ge=0, le=100, description="fewest words a line, on average")

    def measure(self, doc: Doc) -> float:
        return len(doc.words) / (doc.text.count("\n") + 1)
