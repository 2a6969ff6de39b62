"""Alpha-weighted per-language sampling of training text under a byte budget (XLM / BigScience style).

Languages are weighted ``p_lang ∝ n_lang ** alpha`` where ``n_lang`` is the language's text size in UTF-8
bytes; alpha=1 keeps the natural proportions, alpha=0 makes every language equal, and BigScience used 0.3
for the BLOOM tokenizer (``make_ratios_thomas.ipynb``), which lifts small languages without drowning the
large ones.

Algorithm (two streaming passes, deterministic for a seed, memory ~1.25x the budget):

1. Count text bytes per language over all documents (``count_bytes``).
2. Turn probabilities into byte quotas by water-filling (``byte_quotas``): ``q = budget * p``; a language
   whose quota exceeds its size is capped at its size and the excess is shared among the others in
   proportion to their ``p``, until nothing is capped anew. The weights and the water-fill are the blend's
   own (``bloomdata.blend.weights``), in bytes instead of fractions.
3. Give every document a key ``blake2b(seed, text)`` (a seeded shuffle that depends on content only, so
   the sample does not change when files are renamed or reordered, and exact duplicates collapse into
   one). In the second pass keep, per language, only documents whose key falls under the fraction
   ``(1.25 q + 1 MB) / n`` of the key space (a Bernoulli pre-filter that bounds memory), then sort the
   kept documents by key and take them while they fit the quota. A language whose every kept document is
   larger than its quota gets its first document truncated (at a character boundary) to the quota.

Documents without a language are grouped under ``UNKNOWN_LANG``.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bloomdata.blend.weights import alpha_weights, water_fill
from bloomdata.errors import BloomstackError
from bloomdata.readers import (
    UNKNOWN_LANG,
    Document,
    SourceConfig,
    empty_inputs_error,
    plan_shards,
    read_shard,
)

_KEY_SPACE = 1 << 64
_OVERSAMPLE, _SLACK_BYTES = 1.25, 1 << 20  # pre-filter margin so the greedy fill rarely runs short


def alpha_probabilities(sizes: dict[str, int], alpha: float) -> dict[str, float]:
    """p_lang ∝ n_lang ** alpha over languages with some text (sizes in any unit)."""
    present = {lang: n for lang, n in sizes.items() if n > 0}
    if not present:
        alpha_weights({"": 1}, alpha)  # still refuse a bad alpha
        return {}
    return alpha_weights(present, alpha)


def byte_quotas(sizes: dict[str, int], alpha: float, budget: int) -> dict[str, int]:
    """Bytes to draw per language: budget * p_lang, each capped at its language's size (water-filling);
    a budget above the corpus caps every language, i.e. takes everything."""
    probs = alpha_probabilities(sizes, alpha)
    quotas = water_fill(probs, budget, hi={lang: sizes[lang] for lang in probs})
    return {lang: int(quotas[lang]) for lang in sorted(quotas)}


def doc_key(seed: int, text: str) -> int:
    """A 64-bit pseudo-random key of (seed, text): the seeded shuffle order of a document."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "little")


@dataclass
class Sample:
    """Training text drawn per language, and the numbers behind it (for the training report)."""

    texts: dict[str, list[str]]
    sizes: dict[str, int]  # bytes available per language
    probabilities: dict[str, float]
    quotas: dict[str, int]  # bytes asked per language
    drawn: dict[str, int] = field(default_factory=dict)  # bytes actually drawn per language
    docs: dict[str, int] = field(default_factory=dict)  # documents drawn per language

    def iter_texts(self) -> Iterable[str]:
        for lang in sorted(self.texts):
            yield from self.texts[lang]


def _progress(items: Iterable[Document], desc: str, show: bool) -> Iterable[Document]:
    if not show:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit=" docs", file=sys.stderr, mininterval=1.0)


def _documents(sources: list[SourceConfig]) -> Iterable[Document]:
    shards = plan_shards(sources)  # resolve every path first: a typo fails before any progress bar shows
    return (item for shard in shards for item in read_shard(shard) if isinstance(item, Document))


def count_bytes(sources: list[SourceConfig], show_progress: bool = False) -> dict[str, int]:
    """Pass 1: UTF-8 bytes of text per language."""
    sizes: dict[str, int] = {}
    for doc in _progress(_documents(sources), "counting text", show_progress):
        lang = doc.lang or UNKNOWN_LANG
        sizes[lang] = sizes.get(lang, 0) + len(doc.text.encode("utf-8"))
    return sizes


def cutoffs(sizes: dict[str, int], quotas: dict[str, int]) -> dict[str, int]:
    """Per language, the key below which a document is kept by the second pass (the Bernoulli pre-filter)."""
    return {lang: min(_KEY_SPACE, int(_KEY_SPACE * (_OVERSAMPLE * q + _SLACK_BYTES) / sizes[lang]))
            for lang, q in quotas.items()}


def fill(sizes: Sequence[int], quota: int) -> list[int]:
    """The documents taken, by position in key order: each one that still fits the quota (``sizes`` in UTF-8
    bytes; a document too large is skipped and later smaller ones may still fit)."""
    taken, used = [], 0
    for i, n in enumerate(sizes):
        if used + n <= quota:
            taken.append(i)
            used += n
    return taken


def truncate(text: str, quota: int) -> str:
    """``text`` cut to at most ``quota`` UTF-8 bytes, at a character boundary (a language whose every kept
    document is larger than its quota gives its first document so cut)."""
    return text.encode("utf-8")[:quota].decode("utf-8", errors="ignore")


def draw_sample(sources: list[SourceConfig], alpha: float, byte_budget: int, seed: int,
                show_progress: bool = False) -> Sample:
    """Both passes: alpha-weighted, budgeted, seeded sample of the sources' documents (see module doc)."""
    if byte_budget < 1:
        raise BloomstackError(f"byte_budget must be >= 1, got {byte_budget}")
    sizes = count_bytes(sources, show_progress)
    if not sizes:
        raise empty_inputs_error(sources)
    quotas = byte_quotas(sizes, alpha, byte_budget)
    cutoff = cutoffs(sizes, quotas)
    kept: dict[str, dict[int, str]] = {lang: {} for lang in quotas}
    for doc in _progress(_documents(sources), "sampling text", show_progress):
        lang = doc.lang or UNKNOWN_LANG
        key = doc_key(seed, doc.text)
        if key < cutoff[lang]:
            kept[lang][key] = doc.text  # equal text -> equal key: duplicates collapse
    sample = Sample({}, sizes, alpha_probabilities(sizes, alpha), quotas)
    for lang, by_key in kept.items():
        ordered = [by_key[key] for key in sorted(by_key)]
        texts = [ordered[i] for i in fill([len(t.encode("utf-8")) for t in ordered], quotas[lang])]
        if not texts and ordered and quotas[lang] > 0:
            texts = [truncate(ordered[0], quotas[lang])]
        sample.texts[lang], sample.docs[lang] = texts, len(texts)
        sample.drawn[lang] = sum(len(t.encode("utf-8")) for t in texts)
    return sample
