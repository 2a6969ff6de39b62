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

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from bloomdata.config_loader import cli_option, close_name_hint
from bloomdata.errors import FieldValueError
from bloomdata.readers import ShardBytes, SourceConfig, shard_bytes_field, sources_field

MARKER_VERSION = 2  # bump when a work file's format changes: every old marker becomes invalid
SUMMARY_FILE = "clean_summary.json"
REMOVED_FILE = "removed.jsonl.zst"
REPORT_MD = "clean.md"
REPORT_PNG = "clean.png"
DATA_DIR = "data"  # OUT/data/<lang>/part-*.jsonl.zst: what `bloomdata build --input OUT/data` reads
WORK_DIR = "work"  # per-shard candidates, hashes, signatures and markers (removed at the end)
LOCK_FILE = ".bloomdata-clean.lock"
# Shipped config files (``bloomdata clean --preset NAME``; configs/clean/NAME.yaml links to them).
PRESETS = {name: str(Path(__file__).with_name("presets") / f"{name}.yaml") for name in ("default", "roots")}

# Why a document was removed, in the order the checks run (stable keys: summaries and reports use them).
FILTER_REASONS = (
    "empty",  # nothing left after normalization
    "too_few_words", "too_many_words", "too_few_chars", "too_many_chars", "too_few_bytes", "too_few_space_words",
    "special_characters", "closed_class_words", "flagged_words", "word_repetition", "char_repetition",
    "lang_id", "perplexity",
)
DEDUP_REASONS = ("exact_duplicate", "near_duplicate")
# The quality steps in the order the default preset runs them (cheapest first); the roots preset runs ROOTS's.
DEFAULT_STEPS = ("words", "chars", "special_characters", "closed_class_words", "flagged_words", "word_repetition",
                 "char_repetition", "lang_id", "perplexity")
ROOTS_STEPS = ("words", "char_repetition", "word_repetition", "special_characters", "closed_class_words",
               "flagged_words", "lang_id", "perplexity")
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
    # ROOTS's per-language text handling (off by default; the roots preset sets them as ROOTS did)
    remove_words_containing: list[str] | None = Field(
        default=None, description="drop from the text every word (space-separated, stripped) holding one of "
                                  "these substrings, e.g. [http, www, .com, href, //] (ROOTS); lines, tabs and "
                                  "spaces are re-joined as ROOTS did")
    max_word_length: int | None = Field(
        default=None, ge=1, description="drop from the text words longer than this (also after stripping) (ROOTS)")
    sentencepiece_words: bool = Field(
        default=False, description="words are the pieces of the language's sentencepiece model (ROOTS zh); "
                                   "without a model, one word per character")
    word_augmentation: list[int] = Field(
        default_factory=list, description="also match closed-class and flagged words against runs of this many "
                                          "words (ROOTS vi and zh: [2])")
    augmentation_join: str = Field(default="", description="what joins the words of an augmentation run")
    # ROOTS catalogue's small-document filters (01a_catalogue_cleaning_and_filtering, filter_small_docs*)
    min_bytes: int | None = Field(default=None, ge=1, description="fewest UTF-8 bytes (catalogue: 300 or 1024)")
    min_space_words: int | None = Field(
        default=None, ge=1, description="fewest pieces of the text split on ' ' (catalogue's filter_small_docs: 15; "
                                        "runs of spaces count their empty pieces, as there)")


def not_in_key(*flags: str, **cli: Any) -> dict[str, Any]:
    """``json_schema_extra`` of a field that does not change what a shard's filter stage writes (where and how
    the run goes, or a value the key holds in another form): ``shard_settings`` leaves it out. Every other
    field is in the key, so a new setting can never reuse stale shards."""
    return {**cli_option(*flags, **cli), "shard_key": False}


MODEL_FILES = "model_files"  # a field of model paths: the key holds each file's path, size and mtime


def shard_settings(model: BaseModel, file_identity) -> dict[str, Any]:
    """``model`` as the shard key sees it: every field but those marked ``not_in_key``, nested sections
    recursively, model paths as ``file_identity(path)``."""
    out: dict[str, Any] = {}
    for name, info in type(model).model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if extra.get("shard_key") is False:
            continue
        value = getattr(model, name)
        if extra.get(MODEL_FILES):
            paths = value if isinstance(value, dict) else {"": value}
            value = {k: file_identity(v) if v else None for k, v in sorted(paths.items())}
        elif isinstance(value, BaseModel):
            value = shard_settings(value, file_identity)
        out[name] = value
    return out


def _check_lang_key(lang: str) -> str:
    if not lang or any(c.isspace() for c in lang):
        raise ValueError(f"language key {lang!r}: use the documents' lang value, e.g. en or zh")
    return lang


class QualityConfig(BaseModel):
    """The ROOTS-style filters: length, repetition, special characters, closed-class and flagged words."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="run the quality filters")
    steps: list[str] = Field(default_factory=lambda: list(DEFAULT_STEPS),
                             description="the filter steps, in the order they run (names of "
                                         "bloomdata.clean.steps.FILTERS); the first that fails names the reason")
    words: Literal["units", "roots"] = Field(
        default="units", description="how words are found: units (a word, or a character of an unspaced script, "
                                     "lower-cased, stripped of punctuation, symbols and digits) or roots (ROOTS: "
                                     "split on space, tab and newline, stripped of ROOTS's special characters)")
    special_characters: Literal["categories", "roots"] = Field(
        default="categories", description="special characters: Unicode categories P, S, N, Z and controls, or "
                                          "ROOTS's special_characters_default set")
    word_lists: Literal["bloomstack", "roots"] = Field(
        default="bloomstack", description="shipped word lists: bloomstack (short closed-class lists, no flagged "
                                          "words) or roots (ROOTS's stopwords and flagged words for its 13 "
                                          "languages, the bloomstack closed-class lists for the others)")
    defaults: Thresholds = Field(default_factory=Thresholds, description="thresholds of every language")
    languages: dict[str, dict[str, Any]] = Field(
        default_factory=dict, json_schema_extra=cli_option(skip=True),
        description="per-language overrides of some thresholds, e.g. {zh: {min_words: 5}, en: {min_closed_class: 0.2}}")
    closed_class_words: dict[str, list[str] | str] = Field(
        default_factory=dict, json_schema_extra=not_in_key(metavar="LANG=FILE"),  # the key holds the lists read
        description="closed-class (function) words per language: a list, or a file with one per line; replaces "
                    "the built-in list of that language")
    builtin_closed_class_words: bool = Field(
        default=True, description="use the shipped closed-class lists (bloomdata.clean.closed_class)")
    flagged_words: dict[str, list[str] | str] = Field(
        default_factory=dict, json_schema_extra=not_in_key(metavar="LANG=FILE"),  # the key holds the lists read
        description="flagged words per language: a list, or a file with one per line (none are shipped)")

    @field_validator("steps")
    @classmethod
    def _known_steps(cls, steps: list[str]) -> list[str]:
        from bloomdata.clean.steps import FILTERS  # the registry imports this module

        for name in steps:
            if name not in FILTERS:
                raise ValueError(f"unknown filter step {name!r}; {close_name_hint(name, list(FILTERS))}")
        if len(set(steps)) != len(steps):
            raise ValueError(f"a filter step is listed twice in {steps}")
        return steps

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
    roots_whitespace: bool = Field(
        default=False, description="ROOTS's document modification: strip the document, then its 12 odd "
                                   "whitespace characters (NBSP, U+2002-U+200A, U+3000, U+FFFC, ...) become ' '")
    roots_punctuation: bool = Field(
        default=False, description="ROOTS's unicode punctuation replacement (，-> , 。-> . « -> \" ...)")


class LangIdConfig(BaseModel):
    """Language-identification confidence with a fastText model you supply (e.g. lid.176.bin)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, json_schema_extra={**cli_option(metavar="FILE"), MODEL_FILES: True},
                              description="fastText language-id model; the step is off without one")
    label_format: str = Field(default="__label__{lang}",
                              description="the model's label of a language, from the document's lang")
    labels: dict[str, str] = Field(default_factory=dict,
                                   description="labels that label_format does not give, e.g. zh=__label__zho_Hans")


class PerplexityConfig(BaseModel):
    """Perplexity with per-language KenLM models you supply; languages without a model skip the step."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, str] = Field(default_factory=dict,
                                   json_schema_extra={**cli_option(metavar="LANG=FILE"), MODEL_FILES: True},
                                   description="KenLM model (.arpa or .bin) per language, scored on the "
                                               "whitespace-split words of each line")


class SentencePieceConfig(BaseModel):
    """sentencepiece models you supply per language (ROOTS's ``<lang>.sp.model``): they tokenise text before
    KenLM scoring and give the words of languages whose settings say ``sentencepiece_words``."""

    model_config = ConfigDict(extra="forbid")

    models: dict[str, str] = Field(default_factory=dict,
                                   json_schema_extra={**cli_option(metavar="LANG=FILE"), MODEL_FILES: True},
                                   description="sentencepiece model per language")


class PiiConfig(BaseModel):
    """PII redaction as in ROOTS: its high-risk categories (EMAIL, IP_ADDRESS; KEY and USER optional) replaced
    by placeholders, each match at its own span."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="redact personal information")
    emails: bool = Field(default=True, description="replace e-mail addresses")
    ip_addresses: bool = Field(default=True, description="replace IPv4 and IPv6 addresses")
    # not "keys": Prefect takes a model with a keys attribute for a mapping when it resolves flow parameters
    secrets: bool = Field(default=False, description="replace keys: API tokens, hex digests, payment card numbers "
                                                     "(ROOTS's KEY)")
    users: bool = Field(default=False, description="replace @user names (ROOTS's USER)")
    email_placeholder: str = Field(default="PI:EMAIL", description="what an e-mail address becomes (ROOTS')")
    ip_placeholder: str = Field(default="PI:IP_ADDRESS", description="what an IP address becomes (ROOTS')")
    key_placeholder: str = Field(default="PI:KEY", description="what a key becomes (ROOTS')")
    user_placeholder: str = Field(default="PI:USER", description="what a user name becomes (ROOTS')")


class ExactDedupConfig(BaseModel):
    """Exact deduplication on a hash of the normalized text, across all inputs."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="remove exact duplicates (the first in plan order stays)")
    key: Literal["text", "roots_document"] = Field(
        default="text", description="what is compared: text (xxh3-128 of the text, whitespace runs as one) or "
                                    "roots_document (ROOTS catalogue's dedup_document: md5 of the text without "
                                    "whitespace, digits and ASCII punctuation)")
    casefold: bool = Field(default=True, description="key text: compare case-folded text")


class NearDedupConfig(BaseModel):
    """Near-duplicate removal with MinHash LSH: documents sharing any band of their signature are duplicates."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="remove near duplicates (the first in plan order stays)")
    n_grams: int = Field(default=3, ge=1, description="word units per shingle")
    bands: int = Field(default=20, ge=1, description="LSH bands; more catch lower similarity")
    rows: int = Field(default=5, ge=1, description="hashes per band; more demand higher similarity")
    seed: int = Field(default=1, description="seed of the hash permutations (same for every shard)")
    docs_per_task: int = Field(default=4_000_000, ge=1, json_schema_extra=not_in_key(), description="documents per band-join task (its memory: "
                                                                    "~40 bytes each)")


def _sources_field() -> Any:
    """``sources_field()``, not in the settings key: each shard's own key names its file, format, fields and lang."""
    field = sources_field()
    return Field(min_length=1, description=field.description,
                 json_schema_extra={**field.json_schema_extra, "shard_key": False})


class TemplateDedupConfig(BaseModel):
    """The catalogue's dedup_template: long lines repeated across the dataset removed from every document."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="remove template lines (ROOTS catalogue's dedup_template_soft)")
    min_line_chars: int = Field(default=15, ge=1, description="shortest line (stripped) that can be a template")
    min_occurrences: int = Field(default=10, ge=2, description="occurrences in the surviving documents that make "
                                                               "a line a template")


class SimHashConfig(BaseModel):
    """Near-duplicate removal with SimHash as ROOTS ran it on OSCAR: 64-bit fingerprints of character windows,
    near duplicates within ``hamming_distance`` bits (all pairs, then clusters: the first in plan order stays)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="remove SimHash near duplicates (beside or instead of MinHash)")
    window: int = Field(default=6, ge=1, description="characters (or space tokens) per window (ROOTS: 6)")
    space_languages: list[str] = Field(
        default_factory=lambda: ["en"], description="languages windowed by space-separated tokens instead of "
                                                    "characters (ROOTS: en)")
    hamming_distance: int = Field(default=4, ge=0, le=16, description="most differing bits of near duplicates")
    blocks: int = Field(default=6, ge=2, le=16, description="blocks of the 64 bits; more than hamming_distance")

    @model_validator(mode="after")
    def _blocks_above_distance(self) -> SimHashConfig:
        if self.blocks <= self.hamming_distance:
            raise FieldValueError(f"blocks ({self.blocks}) must be more than hamming_distance "
                                  f"({self.hamming_distance})", "blocks", "hamming_distance")
        return self


class CleanConfig(BaseModel):
    """Everything a clean run needs (shared by ``bloomdata clean`` and the flows)."""

    model_config = ConfigDict(extra="forbid")

    sources: list[SourceConfig] = _sources_field()
    out_dir: str = Field(description="output directory: OUT/data/<lang>/part-*, summary, removed examples, report",
                         json_schema_extra=not_in_key("--out", metavar="DIR"))
    output_format: Literal["jsonl.zst", "parquet"] = Field(default="jsonl.zst", json_schema_extra=not_in_key(),
                                                           description="format of the cleaned shards")
    workers: int = Field(default=2, ge=0, json_schema_extra=not_in_key(),
                         description="LocalCluster worker processes (0: run in-process); also the worker count the "
                                     "shards are planned for (with --scheduler too)")
    scheduler: str | None = Field(default=None, description="tcp://host:port of an existing Dask scheduler",
                                  json_schema_extra=not_in_key(metavar="ADDR"))
    shard_bytes: ShardBytes = shard_bytes_field(shard_key=False)  # in the plan (the shard names its bytes)
    max_rows_per_shard: int | None = Field(default=None, ge=1, json_schema_extra=not_in_key(),  # in the plan
                                           description="cut larger files into row ranges instead of by size "
                                                       "(planning counts every row)")
    strict: bool = Field(default=False, json_schema_extra=not_in_key(), description="the first unreadable row is an error naming file:line")
    max_removed_examples: int = Field(default=20, ge=0, description="examples per reason in removed.jsonl.zst")
    max_example_chars: int = Field(default=2000, ge=0, description="characters of text kept per example")
    keep_work: bool = Field(default=False, json_schema_extra=not_in_key(), description="keep OUT/work (candidates, hashes, signatures) at the end")
    settings_name: str = Field(default="default", json_schema_extra=not_in_key(),
                               description="what the report calls these settings (the roots preset: roots)")
    progress: bool = Field(default=True, json_schema_extra=not_in_key(), description="tqdm progress bars on stderr")
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig, description="normalization")
    quality: QualityConfig = Field(default_factory=QualityConfig, description="quality filters")
    lang_id: LangIdConfig = Field(default_factory=LangIdConfig, description="language-identification filter")
    perplexity: PerplexityConfig = Field(default_factory=PerplexityConfig, description="perplexity filter")
    sentencepiece: SentencePieceConfig = Field(default_factory=SentencePieceConfig,
                                               description="sentencepiece models (words, perplexity)")
    pii: PiiConfig = Field(default_factory=PiiConfig, description="PII redaction")
    exact_dedup: ExactDedupConfig = Field(default_factory=ExactDedupConfig, description="exact deduplication")
    near_dedup: NearDedupConfig = Field(default_factory=NearDedupConfig, description="near-duplicate removal")
    simhash: SimHashConfig = Field(default_factory=SimHashConfig, description="SimHash near-duplicate removal")
    template_dedup: TemplateDedupConfig = Field(default_factory=TemplateDedupConfig,
                                                description="template-line removal")
