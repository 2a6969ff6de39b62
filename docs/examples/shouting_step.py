"""A user's cleaning filter: documents whose letters are mostly capitals go, as ``shouting``
(docs/extending.md)."""

from __future__ import annotations

from pydantic import Field

from bloomdata.clean.language import Doc
from bloomdata.clean.steps import Limit, StepParams


class Shouting(Limit):
    name = "shouting"
    measures = "the share of cased letters that are upper case"
    reasons = ("shouting",)

    class Params(StepParams):
        max_upper: float | None = Field(default=0.5, ge=0, le=1, description="most capitals (share of cased letters)")

    def measure(self, doc: Doc) -> float:
        cased = [c for c in doc.text if c.isupper() or c.islower()]
        return sum(c.isupper() for c in cased) / max(len(cased), 1)
