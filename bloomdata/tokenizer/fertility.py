"""`bloomdata fertility`: tokens per word and per character, per language (optionally beside a 2nd tokenizer).

Fertility is how BigScience chose BLOOM's vocabulary size (no language should lose more than 10 points
against a monolingual tokenizer). Words are whitespace-separated pieces (``str.split()``); for languages
written without spaces between words (zh, ja, th, ...) a "word" is a whole clause, so their per-word
figure is flagged ``whitespace_words=False`` and shown as n/a: compare them by tokens per character.

    bloomdata fertility --tokenizer tok --input ../shared/corpus [--compare other_tok] [--json out.json]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from bloomdata import durable
from bloomdata.errors import BloomstackError
from bloomdata.readers import UNKNOWN_LANG, SourceConfig, iter_documents
from bloomdata.tokenizer.encoder import HFEncoder, TextEncoder

# Scripts without spaces between words: whitespace "words" are clauses there (ISO 639 codes).
NO_SPACE_LANGS = frozenset({"zh", "ja", "th", "lo", "km", "my", "bo", "yue", "wuu", "dz"})
ALL = "(all)"
_BATCH = 256  # documents per encode call


def uses_spaces(lang: str) -> bool:
    return lang.replace("_", "-").split("-")[0].lower() not in NO_SPACE_LANGS


@dataclass
class FertilityRow:
    """One language's counts; ``compare_*`` are filled when a second tokenizer is given."""

    lang: str
    docs: int = 0
    words: int = 0
    chars: int = 0
    tokens: int = 0
    compare_tokens: int | None = None
    whitespace_words: bool = True

    @property
    def tokens_per_word(self) -> float | None:
        return self.tokens / self.words if self.words and self.whitespace_words else None

    @property
    def tokens_per_char(self) -> float:
        return self.tokens / self.chars if self.chars else 0.0

    @property
    def compare_tokens_per_word(self) -> float | None:
        if self.compare_tokens is None or not self.words or not self.whitespace_words:
            return None
        return self.compare_tokens / self.words

    @property
    def compare_tokens_per_char(self) -> float | None:
        return None if self.compare_tokens is None or not self.chars else self.compare_tokens / self.chars

    def to_dict(self) -> dict:
        d = asdict(self)
        d.update(tokens_per_word=self.tokens_per_word, tokens_per_char=self.tokens_per_char)
        if self.compare_tokens is not None:
            d.update(compare_tokens_per_word=self.compare_tokens_per_word,
                     compare_tokens_per_char=self.compare_tokens_per_char)
        return d


def _count_tokens(encoder: TextEncoder, texts: list[str]) -> int:
    return int(encoder.encode_flat(texts)[1][-1])


def _encoder(tokenizer: Any) -> TextEncoder:
    """An encoder as is; a ``tokenizers.Tokenizer`` through HF's encoder."""
    return tokenizer if hasattr(tokenizer, "encode_flat") else HFEncoder(tokenizer)


def fertility_table(tokenizer: Any, sources: list[SourceConfig], compare: Any = None,
                    max_docs_per_lang: int | None = None) -> list[FertilityRow]:
    """Per-language rows (sorted by language) plus a final ``(all)`` row over every counted document.
    ``tokenizer``, ``compare``: encoders (``bloomdata.tokenizer.encoder.load_encoder``) or HF Tokenizers."""
    tokenizer = _encoder(tokenizer)
    compare = None if compare is None else _encoder(compare)
    rows: dict[str, FertilityRow] = {}
    pending: dict[str, list[str]] = {}

    def flush(lang: str) -> None:
        texts, row = pending.pop(lang, []), rows[lang]
        if texts:
            row.tokens += _count_tokens(tokenizer, texts)
            if compare is not None:
                row.compare_tokens = (row.compare_tokens or 0) + _count_tokens(compare, texts)

    for doc in iter_documents(sources):
        lang = doc.lang or UNKNOWN_LANG
        row = rows.setdefault(lang, FertilityRow(lang, whitespace_words=uses_spaces(lang)))
        if max_docs_per_lang is not None and row.docs >= max_docs_per_lang:
            continue
        row.docs += 1
        row.words += len(doc.text.split())
        row.chars += len(doc.text)
        pending.setdefault(lang, []).append(doc.text)
        if len(pending[lang]) >= _BATCH:
            flush(lang)
    for lang in list(pending):
        flush(lang)
    if not rows:
        raise BloomstackError("the inputs hold no documents (every row was empty or rejected)")
    table = [rows[lang] for lang in sorted(rows)]
    total = FertilityRow(ALL, whitespace_words=False)  # mixed scripts: per-word is not meaningful overall
    for row in table:
        total.docs += row.docs
        total.words += row.words
        total.chars += row.chars
        total.tokens += row.tokens
        if row.compare_tokens is not None:
            total.compare_tokens = (total.compare_tokens or 0) + row.compare_tokens
    return table + [total]


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def to_markdown(rows: list[FertilityRow], name: str = "tokenizer", compare_name: str | None = None) -> str:
    """A Markdown table: tokens per word (n/a where words are not space-separated) and per character."""
    head = ["lang", "docs", "words", "chars", f"{name} tokens", "tok/word", "tok/char"]
    if compare_name:
        head += [f"{compare_name} tokens", "tok/word", "tok/char", "ratio"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for r in rows:
        cells = [r.lang, str(r.docs), str(r.words), str(r.chars), str(r.tokens),
                 _fmt(r.tokens_per_word), _fmt(r.tokens_per_char)]
        if compare_name:
            ratio = r.compare_tokens / r.tokens if r.compare_tokens is not None and r.tokens else None
            cells += [str(r.compare_tokens), _fmt(r.compare_tokens_per_word), _fmt(r.compare_tokens_per_char),
                      _fmt(ratio)]
        lines.append("| " + " | ".join(cells) + " |")
    if any(not r.whitespace_words for r in rows if r.lang != ALL):
        lines.append("\nn/a: the language is written without spaces between words; compare tok/char.")
    return "\n".join(lines)


# --- the JSON file: {"tokenizer": DIR, "compare": DIR | null, "rows": [FertilityRow.to_dict(), ...]} ---------------

FERTILITY_FILE = "fertility.json"  # its name beside tokenizer.json when the flows' tokenizer stage measured it


def fertility_record(rows: list[FertilityRow], tokenizer: str, compare: str | None = None) -> dict:
    """The JSON document of a fertility table (``bloomdata fertility --json``/``--out``, ``write_fertility``)."""
    return {"tokenizer": tokenizer, "compare": compare, "rows": [r.to_dict() for r in rows]}


def write_fertility(path: str, rows: list[FertilityRow], tokenizer: str, compare: str | None = None) -> None:
    """The rows as JSON (``bloomdata fertility --out``, the pipeline's tokenizer stage); atomic."""
    durable.write_json(path, fertility_record(rows, tokenizer, compare), indent=2)


def read_fertility(path: str, key: str) -> list[FertilityRow]:
    """The rows of a fertility JSON file (``write_fertility``); an error naming ``key`` when it is not one."""
    record = durable.read_json(path)
    names = {f.name for f in fields(FertilityRow)}
    try:
        return [FertilityRow(**{k: v for k, v in row.items() if k in names}) for row in record["rows"]]  # type: ignore[index]
    except (TypeError, KeyError, AttributeError):
        raise BloomstackError(f"{key} {path}: not a fertility table (the JSON `bloomdata fertility --out` writes, "
                              "with its 'rows'); write it again with that command", keys=[key]) from None
