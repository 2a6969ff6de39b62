"""The documents to score, per language, from any input the build reads (``bloomdata.readers``).

Order is the build's plan order (sources in order, each source's files sorted by path, rows in file order),
and ``max_docs_per_lang`` keeps the first N documents of each language in that order, so the same inputs
always give the same documents. Rows the readers reject are counted by reason exactly as ``bloomdata build``
counts them (every known reason listed, 0 included), with a few examples.

Trade-off: the texts are held in memory (evaluation sets are held-out samples, megabytes, and every model
re-tokenizes them with its own tokenizer). To keep a capped read of a large corpus cheap, a source whose
language is fixed (``LANG=PATH``) stops being read once that language has its N documents; rejects are then
counted over the rows read (``rows_read``), not over the whole file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bloomdata.errors import BloomstackError
from bloomdata.readers import (
    REJECT_REASONS,
    UNKNOWN_LANG,
    Document,
    Reject,
    SourceConfig,
    plan_shards,
    read_shard,
)

MAX_REJECT_EXAMPLES = 5  # per reason, in plan order


@dataclass
class EvalDocuments:
    """Texts per language (first-seen order of languages, plan order within one) and what was rejected."""

    texts: dict[str, list[str]]
    rejects: dict[str, int]  # reason -> rows, every reason of REJECT_REASONS
    reject_examples: list[dict] = field(default_factory=list)  # Reject fields: reason, path, line, detail
    rows_read: int = 0

    @property
    def documents(self) -> int:
        return sum(len(t) for t in self.texts.values())


def language_of(doc: Document) -> str:
    """The report's language key: the document's language, or ``und`` (as the build names such outputs)."""
    return doc.lang or UNKNOWN_LANG


def read_documents(sources: list[SourceConfig], max_docs_per_lang: int | None = None) -> EvalDocuments:
    """Every document of ``sources`` (the first ``max_docs_per_lang`` per language), in plan order.

    Raises a one-line BloomstackError when a language given as ``LANG=PATH`` ends up with no document, or
    when there is no document at all.
    """
    out = EvalDocuments(texts={}, rejects=dict.fromkeys(REJECT_REASONS, 0))

    def full(lang: str) -> bool:
        return max_docs_per_lang is not None and len(out.texts.get(lang, ())) >= max_docs_per_lang

    for shard in plan_shards(sources):
        if shard.lang is not None and full(shard.lang):
            continue  # every row of this file is in a language that has its N documents
        for item in read_shard(shard):
            out.rows_read += 1
            if isinstance(item, Reject):
                out.rejects[item.reason] = out.rejects.get(item.reason, 0) + 1
                if out.rejects[item.reason] <= MAX_REJECT_EXAMPLES:
                    out.reject_examples.append(dataclasses.asdict(item))
                continue
            lang = language_of(item)
            if not full(lang):
                out.texts.setdefault(lang, []).append(item.text)
            if shard.lang is not None and full(lang):
                break
    for source in sources:
        if source.lang is not None and not out.texts.get(source.lang):
            rejected = {k: v for k, v in out.rejects.items() if v}
            raise BloomstackError(f"sources {source.lang}={','.join(source.paths)}: no documents for language "
                                  f"{source.lang!r} (rejected rows: {rejected or 'none'}); check the path and "
                                  f"the text field ({source.text_field!r})")
    if not out.texts:
        rejected = {k: v for k, v in out.rejects.items() if v}
        paths = ", ".join(p for s in sources for p in s.paths)
        raise BloomstackError(f"sources {paths}: no documents to score ({out.rows_read} rows read, rejected: "
                              f"{rejected or 'none'}); check the inputs and their text_field", keys=["sources"])
    return out
