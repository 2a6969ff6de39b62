"""``CleanConfig``: everything ``bloomdata clean`` needs (shared by the CLI and the flows), and the names of
the files it writes.

Every step is a section with an ``enabled`` switch (the model-based ones are on only when a model is
given). Quality thresholds come in one ``defaults`` block, which holds for every language, seen or not,
plus partial per-language overrides (``quality.languages: {zh: {min_words: 5}}``); a threshold set to
null switches that check off for that language. The defaults are script-agnostic because word-based
measures count *word units* (``bloomdata.clean.text``): a word in spaced scripts, one character in scripts
written without spaces (Han, kana, Thai, Lao, Khmer, Myanmar, Tibetan), so zh, ja and th are never
rejected for "having one word".
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bloomdata.config import cli_option, close_name_hint
from bloomdata.readers import SourceConfig, sources_field

MARKER_VERSION = 1  # bump when a work file's format changes: every old marker becomes invalid
SUMMARY_FILE = "clean_summary.json"
REMOVED_FILE = "removed.jsonl.zst"
REPORT_MD = "clean.md"
REPORT_PNG = "clean.png"
DATA_DIR = "data"  # OUT/data/<lang>/part-*.jsonl.zst: what `bloomdata build --input OUT/data` reads
WORK_DIR = "work"  # per-shard candidates, hashes, signatures and markers (removed at the end)
LOCK_FILE = ".bloomdata-clean.lock"

# Why a document was removed, in the order the checks run (stable keys: summaries and reports use them).
FILTER_REASONS = (
    "empty",  # nothing left after normalization
    "too_few_words", "too_many_words", "too_few_chars", "too_many_chars",
    "special_characters", "closed_class_words", "flagged_words", "word_repetition", "char_repetition",
    "lang_id", "perplexity",
)
DEDUP_REASONS = ("exact_duplicate", "near_duplicate")
REASONS = FILTER_REASONS + DEDUP_REASONS


class Thresholds(BaseModel):
    """ROOTS-style quality thresholds for one language; null switches a check off.

    Words are word units (a word, or one character of an unspaced script) with punctuation, symbols and
    digits stripped, lower-cased. Ratios are in [0, 1].
    """

    model_config = ConfigDict(extra="forbid")

    min_words: int | None = Field(default=10, ge=0, description="fewest word units in a document")
    max_words: int | None = Field(default=100_000, ge=1, description="most word units in a document")
    min_chars: int | None = Field(default=30, ge=0, description="fewest characters (after normalization)")
    max_chars: int | None = Field(default=None, ge=1, description="most characters (after normalization)")
    char_repetition_n: int = Field(default=10, ge=1, description="character n-gram length of the repetition ratio")
    max_char_repetition: float | None = Field(
        default=0.2, ge=0, le=1, description="most of the text covered by its sqrt(#distinct) most frequent "
                                             "repeated character n-grams (ROOTS character repetition ratio)")
    word_repetition_n: int = Field(default=5, ge=1, description="word n-gram length of the repetition ratio")
    max_word_repetition: float | None = Field(
        default=0.3, ge=0, le=1, description="most word n-grams that occur more than once (share of all)")
    max_special_chars: float | None = Field(
        default=0.4, ge=0, le=1, description="most characters that are punctuation, symbols, digits or spaces")
    min_closed_class: float | None = Field(
        default=0.05, ge=0, le=1, description="fewest closed-class words (share of words); languages without a "
                                             "list skip it")
    max_flagged: float | None = Field(
        default=0.01, ge=0, le=1, description="most flagged words (share of words); languages without a list skip it")
    min_lang_id_score: float | None = Field(
        default=0.7, ge=0, le=1, description="least fastText probability of the document's own language")
    max_perplexity: float | None = Field(default=10_000, gt=0, description="highest KenLM perplexity")


def _check_lang_key(lang: str) -> str:
    if not lang or any(c.isspace() for c in lang):
        raise ValueError(f"language key {lang!r}: use the documents' lang value, e.g. en or zh")
    return lang


class QualityConfig(BaseModel):
    """The ROOTS-style filters: length, repetition, special characters, closed-class and flagged words."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="run the quality filters")
    defaults: Thresholds = Field(default_factory=Thresholds, description="thresholds of every language")
    languages: dict[str, dict[str, Any]] = Field(
        default_factory=dict, json_schema_extra=cli_option(skip=True),
        description="per-language overrides of some thresholds, e.g. {zh: {min_words: 5}, en: {min_closed_class: 0.2}}")
    closed_class_words: dict[str, list[str] | str] = Field(
        default_factory=dict, json_schema_extra=cli_option(metavar="LANG=FILE"),
        description="closed-class (function) words per language: a list, or a file with one per line; replaces "
                    "the built-in list of that language")
    builtin_closed_class_words: bool = Field(
        default=True, description="use the shipped closed-class lists (bloomdata.clean.closed_class)")
    flagged_words: dict[str, list[str] | str] = Field(
        default_factory=dict, json_schema_extra=cli_option(metavar="LANG=FILE"),
        description="flagged words per language: a list, or a file with one per line (none are shipped)")

    @model_validator(mode="after")
    def _overrides_are_thresholds(self) -> QualityConfig:
        for lang in [*self.languages, *self.closed_class_words, *self.flagged_words]:
            _check_lang_key(lang)
        for lang in self.languages:
            self.thresholds_for(lang)
        return self

    def thresholds_for(self, lang: str | None) -> Thresholds:
        """The defaults with ``languages[lang]`` on top (an unknown language gets the defaults)."""
        override = self.languages.get(lang or "") or {}
        if not override:
            return self.defaults
        try:
            return Thresholds.model_validate({**self.defaults.model_dump(), **override})
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(map(str, err["loc"]))
            hint = f"; {close_name_hint(key, list(Thresholds.model_fields))}" if err["type"] == "extra_forbidden" else ""
            raise ValueError(f"languages.{lang}.{key}: {err['msg']} (got {err.get('input')!r}){hint}") from None


class NormalizeConfig(BaseModel):
    """Whitespace and control characters only; Unicode normalization is off, as in BLOOM's tokenizer."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="normalize the text")
    controls: bool = Field(default=True, description="drop control characters (tab and newline kept) and U+FEFF")
    c1_as_cp1252: bool = Field(
        default=True, description="with controls: a C1 control that has a cp1252 meaning (U+0092 for ’, U+009C "
                                  "for œ: text decoded as Latin-1 instead of cp1252) becomes that character")
    whitespace: bool = Field(
        default=True, description="odd spaces (NBSP, U+3000, ...) become ' ', runs of spaces one, CRLF LF, "
                                  "3+ newlines two, lines and the document stripped")
    unicode_form: Literal["none", "NFC", "NFKC"] = Field(default="none", description="Unicode normalization form")


class LangIdConfig(BaseModel):
    """Language-identification confidence with a fastText model you supply (e.g. lid.176.bin)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, json_schema_extra=cli_option(metavar="FILE"),
                              description="fastText language-id model; the step is off without one")
    label_format: str = Field(default="__label__{lang}",
                              description="the model's label of a language, from the document's lang")
    labels: dict[str, str] = Field(default_factory=dict,
                                   description="labels that label_format does not give, e.g. zh=__label__zho_Hans")


class PerplexityConfig(BaseModel):
    """Perplexity with per-language KenLM models you supply; languages without a model skip the step."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, str] = Field(default_factory=dict, json_schema_extra=cli_option(metavar="LANG=FILE"),
                                   description="KenLM model (.arpa or .bin) per language, scored on the "
                                               "whitespace-split words of each line")


class PiiConfig(BaseModel):
    """PII redaction as in ROOTS: e-mail and IP addresses replaced by placeholders."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="redact personal information")
    emails: bool = Field(default=True, description="replace e-mail addresses")
    ip_addresses: bool = Field(default=True, description="replace IPv4 and IPv6 addresses")
    email_placeholder: str = Field(default="PI:EMAIL", description="what an e-mail address becomes (ROOTS')")
    ip_placeholder: str = Field(default="PI:IP_ADDRESS", description="what an IP address becomes (ROOTS')")


class ExactDedupConfig(BaseModel):
    """Exact deduplication on a hash of the normalized text, across all inputs."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="remove exact duplicates (the first in plan order stays)")
    casefold: bool = Field(default=True, description="compare case-folded text (whitespace runs always count as one)")


class NearDedupConfig(BaseModel):
    """Near-duplicate removal with MinHash LSH: documents sharing any band of their signature are duplicates."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="remove near duplicates (the first in plan order stays)")
    n_grams: int = Field(default=3, ge=1, description="word units per shingle")
    bands: int = Field(default=20, ge=1, description="LSH bands; more catch lower similarity")
    rows: int = Field(default=5, ge=1, description="hashes per band; more demand higher similarity")
    seed: int = Field(default=1, description="seed of the hash permutations (same for every shard)")
    docs_per_task: int = Field(default=4_000_000, ge=1, description="documents per band-join task (its memory: "
                                                                    "~40 bytes each)")


class CleanConfig(BaseModel):
    """Everything a clean run needs (shared by ``bloomdata clean`` and the flows)."""

    model_config = ConfigDict(extra="forbid")

    sources: list[SourceConfig] = sources_field()
    out_dir: str = Field(description="output directory: OUT/data/<lang>/part-*, summary, removed examples, report",
                         json_schema_extra=cli_option("--out", metavar="DIR"))
    output_format: Literal["jsonl.zst", "parquet"] = Field(default="jsonl.zst",
                                                           description="format of the cleaned shards")
    workers: int = Field(default=2, ge=0, description="LocalCluster worker processes (0: run in-process)")
    scheduler: str | None = Field(default=None, description="tcp://host:port of an existing Dask scheduler",
                                  json_schema_extra=cli_option(metavar="ADDR"))
    max_rows_per_shard: int | None = Field(default=100_000, ge=1,
                                           description="split larger files into row ranges (bounds a task's memory)")
    strict: bool = Field(default=False, description="the first unreadable row is an error naming file:line")
    max_removed_examples: int = Field(default=20, ge=0, description="examples per reason in removed.jsonl.zst")
    max_example_chars: int = Field(default=2000, ge=0, description="characters of text kept per example")
    keep_work: bool = Field(default=False, description="keep OUT/work (candidates, hashes, signatures) at the end")
    progress: bool = Field(default=True, description="tqdm progress bars on stderr")
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig, description="normalization")
    quality: QualityConfig = Field(default_factory=QualityConfig, description="quality filters")
    lang_id: LangIdConfig = Field(default_factory=LangIdConfig, description="language-identification filter")
    perplexity: PerplexityConfig = Field(default_factory=PerplexityConfig, description="perplexity filter")
    pii: PiiConfig = Field(default_factory=PiiConfig, description="PII redaction")
    exact_dedup: ExactDedupConfig = Field(default_factory=ExactDedupConfig, description="exact deduplication")
    near_dedup: NearDedupConfig = Field(default_factory=NearDedupConfig, description="near-duplicate removal")
