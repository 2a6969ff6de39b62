"""A user's cleaning filter: documents whose characters are too often ASCII digits go, as ``too_many_digits``
(docs/extending.md)."""

from __future__ import annotations

from pydantic import Field

from bloomdata.clean.language import Doc
from bloomdata.clean.steps import Limit, StepParams


class Digits(Limit):
    name = "digits"
    measures = "the share of characters that are ASCII digits"
    reasons = ("too_many_digits",)

    class Params(StepParams):
        max_digits: float | None = Field(default=0.2, ge=0, le=1, description="most ASCII digits (share)")

    def measure(self, doc: Doc) -> float:
        return sum(c in "0123456789" for c in doc.text) / len(doc.text)
