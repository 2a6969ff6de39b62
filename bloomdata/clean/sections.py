"""The settings sections of ``CleanConfig`` that are not the list of steps: the built-in steps' ``Params`` (a
section each: ``normalize``, ``pii``, ``exact_dedup``, ``near_dedup``, ``simhash``, ``template_dedup``, one value
for every language), the model files, and the base of one language's settings (``LanguageSettings``).

Every model here refuses unknown keys (``StepParams``), so a misspelt setting is an error naming it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bloomdata.config_loader import cli_option
from bloomdata.errors import FieldValueError


class StepParams(BaseModel):
    """The base of a step's ``Params``: its parameters, validated, unknown keys refused. A per-language step's
    parameter that may be null is a threshold (null switches the check off for that language)."""

    model_config = ConfigDict(extra="forbid")


def not_in_key(*flags: str, **cli: Any) -> dict[str, Any]:
    """``json_schema_extra`` of a field that does not change what a shard's filter stage writes (where and how
    the run goes, or a value the key holds in another form): ``shard_settings`` leaves it out. Every other
    field is in the key, so a new setting can never reuse stale shards."""
    return {**cli_option(*flags, **cli), "shard_key": False}


MODEL_FILES = "model_files"  # a field of model paths: the key holds each file's path, size and mtime


class LanguageSettings(BaseModel):
    """One language's settings: how its words are found (the fields here, ROOTS's per-language word rule) and
    the parameters of its per-language steps (extra keys, each validated by the ``Params`` of every step that
    declares it: ``bloomdata.clean.settings.Thresholds``)."""

    model_config = ConfigDict(extra="allow")

    sentencepiece_words: bool = Field(
        default=False, description="words are the pieces of the language's sentencepiece model (ROOTS zh); "
                                   "without a model, one word per character")
    word_augmentation: list[int] = Field(
        default_factory=list, description="also match closed-class and flagged words against runs of this many "
                                          "words (ROOTS vi and zh: [2])")
    augmentation_join: str = Field(default="", description="what joins the words of an augmentation run")

    def param(self, name: str) -> Any:
        """A step's parameter (``getattr`` for a key that only a step's ``Params`` declares)."""
        return getattr(self, name)


class NormalizeConfig(StepParams):
    """Whitespace and control characters only; Unicode normalization is off, as in BLOOM's tokenizer."""

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


class PiiConfig(StepParams):
    """PII redaction as in ROOTS: its high-risk categories (EMAIL, IP_ADDRESS; KEY and USER optional) replaced
    by placeholders, each match at its own span."""

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


class ExactDedupConfig(StepParams):
    """Exact deduplication on a hash of the normalized text, across all inputs."""

    enabled: bool = Field(default=True, description="remove exact duplicates (the first in plan order stays)")
    key: Literal["text", "roots_document"] = Field(
        default="text", description="what is compared: text (xxh3-128 of the text, whitespace runs as one) or "
                                    "roots_document (ROOTS catalogue's dedup_document: md5 of the text without "
                                    "whitespace, digits and ASCII punctuation)")
    casefold: bool = Field(default=True, description="key text: compare case-folded text")


class NearDedupConfig(StepParams):
    """Near-duplicate removal with MinHash LSH: documents sharing any band of their signature are duplicates."""

    enabled: bool = Field(default=True, description="remove near duplicates (the first in plan order stays)")
    n_grams: int = Field(default=3, ge=1, description="word units per shingle")
    bands: int = Field(default=20, ge=1, description="LSH bands; more catch lower similarity")
    rows: int = Field(default=5, ge=1, description="hashes per band; more demand higher similarity")
    seed: int = Field(default=1, description="seed of the hash permutations (same for every shard)")
    # 250k: a task adds ~27 MB (~107 bytes an entry for the exact keys and a SimHash band) to a worker's
    # ~200 MB filter-stage peak. At 1M a 10 GB clean (1.3M documents) has 2 ranges of 650k: +67 MB a task,
    # against +14 MB at 1 GB. (The roots preset's 10 GB peak of 260 MB came from finished filter tasks kept on
    # the workers instead, fixed in jobs.executor: benchmarks/RESULTS.md.) More ranges cost one binary search per
    # shard file each; no output changes.
    docs_per_task: int = Field(default=250_000, ge=1, json_schema_extra=not_in_key(),
                               description="documents per band-join task (its memory: ~110 bytes each)")


class TemplateDedupConfig(StepParams):
    """The catalogue's dedup_template: long lines repeated across the dataset removed from every document."""

    enabled: bool = Field(default=False, description="remove template lines (ROOTS catalogue's dedup_template_soft)")
    min_line_chars: int = Field(default=15, ge=1, description="shortest line (stripped) that can be a template")
    min_occurrences: int = Field(default=10, ge=2, description="occurrences in the surviving documents that make "
                                                               "a line a template")


class SimHashConfig(StepParams):
    """Near-duplicate removal with SimHash as ROOTS ran it on OSCAR: 64-bit fingerprints of character windows,
    near duplicates within ``hamming_distance`` bits (all pairs, then clusters: the first in plan order stays)."""

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
