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
from typing import Any, Literal, Protocol

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from bloomdata.config_loader import DASHBOARD, cli_option, close_name_hint, fields_of
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

DEDUP_REASONS = ("exact_duplicate", "near_duplicate")
EMPTY = "empty"  # nothing left after normalization: the reason before any step's
# The quality steps in the order the default preset runs them (cheapest first); the roots preset runs ROOTS's.
DEFAULT_STEPS = ("words", "chars", "special_characters", "closed_class_words", "flagged_words", "word_repetition",
                 "char_repetition", "lang_id", "perplexity")
ROOTS_STEPS = ("words", "char_repetition", "word_repetition", "special_characters", "closed_class_words",
               "flagged_words", "lang_id", "perplexity")


# --- the filter steps, as the config knows them -----------------------------------------------------------
# A filter step is one class (``bloomdata.clean.steps``): its name, its removal reasons and its ``Params``. The
# class registers itself here when it is defined, and everything below learns about it from this registry:
# ``quality.steps`` accepts its name, ``Thresholds`` (per language) its parameters, flags and schemas show
# them, and the summary, the report and the removed examples list its reasons.


class StepParams(BaseModel):
    """The base of a filter step's ``Params``: its parameters for one language. A parameter that may be null is
    a threshold (null switches the check off); the step is off for a language where all its thresholds are."""

    model_config = ConfigDict(extra="forbid")


class FilterStep(Protocol):
    """What the config reads of a filter step class."""

    name: str  # its key in quality.steps
    reasons: tuple[str, ...]  # the removal reasons it gives (keys of the summary's ``removed``)
    Params: type[StepParams]


FILTERS: dict[str, FilterStep] = {}  # name -> step class, in the order they were defined


def register_filter(step: FilterStep) -> None:
    """Make ``step`` known to the config, the summary and the report (``bloomdata.clean.steps.Filter`` calls it
    for every subclass that names itself)."""
    other = FILTERS.get(step.name)
    same = other is not None and _where_defined(other) == _where_defined(step)
    if other is not None and not same:  # (the same class defined again: a reloaded module, a copy sent to a worker)
        raise ValueError(f"two filter steps are named {step.name!r}: {other} and {step}; rename one")
    fields = {f for s in FILTERS.values() if s is not other for f in s.Params.model_fields}
    taken = (fields | set(Thresholds.model_fields)) & set(step.Params.model_fields)
    if taken:
        raise ValueError(f"filter step {step.name!r}: parameter {', '.join(sorted(taken))} is another's; rename it")
    FILTERS[step.name] = step


def _where_defined(step: FilterStep) -> tuple[str, str]:
    return step.__module__, getattr(step, "__qualname__", "")


def filter_reasons() -> tuple[str, ...]:
    """Why a document was removed by the filters, in the order of the steps' definitions: stable keys that the
    summary, the report and the removed examples use."""
    return (EMPTY, *[r for step in FILTERS.values() for r in step.reasons])


def removal_reasons() -> tuple[str, ...]:
    """Every reason a clean run removes a document for: the filters', then deduplication's."""
    return filter_reasons() + DEDUP_REASONS


def step_parameters() -> dict[str, FieldInfo]:
    """The parameters of every filter step (``Thresholds`` holds them beside its own fields)."""
    return {name: info for step in FILTERS.values() for name, info in step.Params.model_fields.items()}


def _step_parameters_schema(schema: dict[str, Any]) -> None:
    """``Thresholds``' JSON schema (the flows' parameter forms) with the steps' parameters."""
    for step in FILTERS.values():
        schema["properties"].update(step.Params.model_json_schema()["properties"])


def _first_error(exc: ValidationError) -> tuple[str, str]:
    """(the field, its message with the value found) of a validation error's first error."""
    err = exc.errors()[0]
    got = "" if err["type"] == "missing" else f" (got {err.get('input')!r})"
    return ".".join(map(str, err["loc"])), f"{err['msg']}{got}"


class Thresholds(BaseModel):
    """One language's settings: ROOTS's per-language text handling (the fields here) and the parameters of
    every filter step (each step's ``Params``, flat: ``min_words``, ``max_char_repetition``, ...; see
    ``step_parameters``), validated by the step that owns them. Null switches a check off.

    Words are word units (a word, or one character of an unspaced script) with punctuation, symbols and
    digits stripped, lower-cased. Ratios are in [0, 1].
    """

    model_config = ConfigDict(extra="allow", json_schema_extra=_step_parameters_schema)

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

    @classmethod
    def run_time_fields(cls) -> dict[str, FieldInfo]:
        """The fields the filter steps add (``bloomdata.config_loader.fields_of``: flags, error messages)."""
        return step_parameters()

    @model_validator(mode="before")
    @classmethod
    def _step_params(cls, data: Any) -> Any:
        """Each step's parameters validated by its ``Params`` (defaults filled in); an unknown key raises."""
        if not isinstance(data, dict):
            return data
        out = {k: v for k, v in data.items() if k in cls.model_fields}
        rest = {k: v for k, v in data.items() if k not in cls.model_fields}
        for step in FILTERS.values():
            given = {k: rest.pop(k) for k in list(rest) if k in step.Params.model_fields}
            try:
                out.update(step.Params.model_validate(given).model_dump())
            except ValidationError as exc:
                field, message = _first_error(exc)
                raise FieldValueError(message, field) from None
        if rest:
            name = next(iter(rest))
            known = [*cls.model_fields, *step_parameters()]
            raise FieldValueError(f"no filter step has a parameter {name!r}; {close_name_hint(name, known)}", name)
        return out

    def param(self, name: str) -> Any:
        """A step's parameter (``getattr`` for a field that only a step class declares)."""
        return getattr(self, name)


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
    for name, info in fields_of(type(model)).items():
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
                             description="the filter steps, in the order they run (names of the step classes, "
                                         "bloomdata.clean.steps); the first that fails names the reason")
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
        for name in steps:
            if name not in FILTERS:
                raise ValueError(f"unknown filter step {name!r}; {close_name_hint(name, list(FILTERS))}")
        if len(set(steps)) != len(steps):
            raise ValueError(f"a filter step is listed twice in {steps}")
        return steps

    # The classes of ``steps``, carried with the config: pickled to Dask workers by reference (or, for a class
    # defined in a function, by value) and registered there as the config is unpickled, so a worker knows every
    # step the config names, a user's too.
    _step_classes: dict[str, FilterStep] = PrivateAttr(default_factory=dict)

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        for step in self._step_classes.values():
            register_filter(step)

    @model_validator(mode="after")
    def _overrides_are_thresholds(self) -> QualityConfig:
        for lang in [*self.languages, *self.closed_class_words, *self.flagged_words]:
            _check_lang_key(lang)
        for lang in self.languages:
            self.thresholds_for(lang)
        self._step_classes = {name: FILTERS[name] for name in self.steps}
        return self

    def step_class(self, name: str) -> FilterStep:
        """The class of the step ``name`` of ``steps``."""
        return self._step_classes[name]

    def thresholds_for(self, lang: str | None) -> Thresholds:
        """The defaults with ``languages[lang]`` on top (an unknown language gets the defaults)."""
        override = self.languages.get(lang or "") or {}
        if not override:
            return self.defaults
        try:
            return Thresholds.model_validate({**self.defaults.model_dump(), **override})
        except ValidationError as exc:
            err = exc.errors()[0]
            cause = (err.get("ctx") or {}).get("error")
            if isinstance(cause, FieldValueError):  # a step's parameter: its message names the value
                raise ValueError(f"languages.{lang}.{cause.fields[0]}: {cause}") from None
            key, message = _first_error(exc)
            raise ValueError(f"languages.{lang}.{key}: {message}") from None


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
    # 250k: a task adds ~27 MB (~107 bytes an entry for the exact keys and a SimHash band) to a worker's
    # ~200 MB filter-stage peak. At 1M a 10 GB clean (1.3M documents) has 2 ranges of 650k: +67 MB a task,
    # against +14 MB at 1 GB. (The roots preset's 10 GB peak of 260 MB came from finished filter tasks kept on
    # the workers instead, fixed in jobs.executor: benchmarks/RESULTS.md.) More ranges cost one binary search per
    # shard file each; no output changes.
    docs_per_task: int = Field(default=250_000, ge=1, json_schema_extra=not_in_key(),
                               description="documents per band-join task (its memory: ~110 bytes each)")


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
    dashboard: bool = Field(default=False, description=DASHBOARD, json_schema_extra=not_in_key())
    shard_bytes: ShardBytes = shard_bytes_field(shard_key=False)  # in the plan (the shard names its bytes)
    max_rows_per_shard: int | None = Field(default=None, ge=1, json_schema_extra=not_in_key(),  # in the plan
                                           description="cut larger files into row ranges instead of by size "
                                                       "(planning counts every row)")
    strict: bool = Field(default=False, json_schema_extra=not_in_key(), description="the first unreadable row is an error naming file:line")
    allow_empty: bool = Field(default=False, json_schema_extra=not_in_key(),
                              description="inputs that yield no document write an empty output (else: an error "
                                          "naming the files and the top reject reason)")
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
