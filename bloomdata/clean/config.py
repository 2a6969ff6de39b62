"""``CleanConfig``: everything ``bloomdata clean`` needs (shared by the CLI and the flows).

The steps (``bloomdata.clean.steps``): ``quality.steps`` lists the filters in the order they run and a user's
own steps (modifiers, filters, keyers) as ``package.module:ClassName``; the built-in modifiers and keyers run
for every document, each switched by its section (``normalize``, ``pii``, ``exact_dedup``, ``near_dedup``,
``simhash``, ``template_dedup``: ``bloomdata.clean.sections``). Per-language parameters come in one
``defaults`` block, which holds for every language, seen or not, plus partial per-language overrides
(``quality.languages: {zh: {min_words: 5}}``); a threshold set to null switches that check off for that
language (``bloomdata.clean.settings``). The defaults are script-agnostic because word-based measures count
*word units* (``bloomdata.clean.text``): a word in spaced scripts, one character in scripts written without
spaces (Han, kana, Thai, Lao, Khmer, Myanmar, Tibetan), so zh, ja and th are never rejected for "having one
word".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from bloomdata.clean.builtin import FILTERS, KEYERS
from bloomdata.clean.files import (
    DATA_DIR,
    EMPTY,
    LOCK_FILE,
    MARKER_VERSION,
    REMOVED_FILE,
    SUMMARY_FILE,
    WORK_DIR,
)
from bloomdata.clean.sections import (
    MODEL_FILES,
    ExactDedupConfig,
    LangIdConfig,
    NearDedupConfig,
    NormalizeConfig,
    PerplexityConfig,
    PiiConfig,
    SentencePieceConfig,
    SimHashConfig,
    StepParams,
    TemplateDedupConfig,
    not_in_key,
)
from bloomdata.clean.settings import Thresholds, parameters, per_language_steps, step_classes
from bloomdata.clean.steps import Filter, Keyer, Step
from bloomdata.config_loader import DASHBOARD, cli_option, fields_of
from bloomdata.errors import BloomstackError, FieldValueError
from bloomdata.readers import ShardBytes, SourceConfig, shard_bytes_field, sources_field

__all__ = ["DATA_DIR", "EMPTY", "LOCK_FILE", "MARKER_VERSION", "REMOVED_FILE", "SUMMARY_FILE", "WORK_DIR",
           "CleanConfig", "ExactDedupConfig", "LangIdConfig", "NearDedupConfig", "NormalizeConfig", "PerplexityConfig",
           "PiiConfig", "QualityConfig", "SentencePieceConfig", "SimHashConfig", "TemplateDedupConfig", "Thresholds"]

# Shipped config files (``bloomdata clean --preset NAME``; configs/clean/NAME.yaml links to them).
PRESETS = {name: str(Path(__file__).with_name("presets") / f"{name}.yaml") for name in ("default", "roots")}

DEDUP_REASONS = ("exact_duplicate", "near_duplicate")  # the built-in keyers' (codes EXACT and NEAR)
# The quality steps in the order the default preset runs them (cheapest first); the roots preset runs ROOTS's.
DEFAULT_STEPS = ("words", "chars", "special_characters", "closed_class_words", "flagged_words", "word_repetition",
                 "char_repetition", "lang_id", "perplexity")
ROOTS_STEPS = ("words", "char_repetition", "word_repetition", "special_characters", "closed_class_words",
               "flagged_words", "lang_id", "perplexity")


def shard_settings(model: BaseModel, file_identity) -> dict[str, Any]:
    """``model`` as the shard key sees it: every field but those marked ``not_in_key`` (and every extra key: a
    step's parameter), nested sections recursively, model paths as ``file_identity(path)``."""
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
    for name, value in (model.model_extra or {}).items():
        out.setdefault(name, value)
    return out


def _check_lang_key(lang: str) -> str:
    if not lang or any(c.isspace() for c in lang):
        raise ValueError(f"language key {lang!r}: use the documents' lang value, e.g. en or zh")
    return lang


class QualityConfig(BaseModel):
    """The steps of ``quality.steps`` (the ROOTS-style filters: length, repetition, special characters,
    closed-class and flagged words; a user's own steps) and the per-language parameters of every step."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(default=True, description="run the quality filters")
    steps: list[str] = Field(default_factory=lambda: list(DEFAULT_STEPS),
                             description="the filters in the order they run (the first that fails names the "
                                         "reason), and your own steps (modifiers, filters, keyers) as "
                                         "package.module:ClassName, each where it runs (bloomdata.clean.steps)")
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
    defaults: Thresholds = Field(default_factory=Thresholds, validate_default=True,
                                 description="the per-language steps' parameters for every language")
    languages: dict[str, dict[str, Any]] = Field(
        default_factory=dict, json_schema_extra=cli_option(skip=True),
        description="per-language overrides of some parameters, e.g. {zh: {min_words: 5}, en: {min_closed_class: 0.2}}")
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
        if len(set(steps)) != len(steps):
            raise ValueError(f"a step is listed twice in {steps}")
        try:
            step_classes(tuple(steps))
        except BloomstackError as exc:  # a ValueError: the config loader names the file and line
            raise ValueError(str(exc)) from None
        return steps

    @field_validator("defaults")
    @classmethod
    def _parameters(cls, defaults: Thresholds, info: ValidationInfo) -> Thresholds:
        """Each parameter validated by the steps that declare it (``Thresholds.of``), once the steps are known."""
        if "steps" not in info.data:  # the steps were refused: that error is reported
            return defaults
        return Thresholds.of(defaults.model_dump(), per_language_steps(step_classes(tuple(info.data["steps"]))))

    @model_validator(mode="after")
    def _overrides_are_parameters(self) -> QualityConfig:
        for lang in [*self.languages, *self.closed_class_words, *self.flagged_words]:
            _check_lang_key(lang)
        keyers = {name for name, owners in self._declared().items() if all(issubclass(s, Keyer) for s in owners)}
        for lang, override in self.languages.items():
            shared = sorted(keyers & set(override))
            if shared:
                key = f"languages.{lang}.{shared[0]}"
                raise FieldValueError(f"{key}: a keyer's parameter holds for every language; set it in "
                                      "quality.defaults", key)
            self.thresholds_for(lang)
        return self

    def _declared(self) -> dict[str, list[type[Step]]]:
        return parameters(per_language_steps(self.step_classes()))

    def step_classes(self) -> tuple[type[Step], ...]:
        """The classes of ``steps``, in order (imported through ``bloomdata.plugins`` once per process)."""
        return step_classes(tuple(self.steps))

    def thresholds_for(self, lang: str | None) -> Thresholds:
        """The defaults with ``languages[lang]`` on top (an unknown language gets the defaults)."""
        override = self.languages.get(lang or "") or {}
        if not override:
            return self.defaults
        try:
            return Thresholds.of({**self.defaults.model_dump(), **override}, per_language_steps(self.step_classes()))
        except FieldValueError as exc:
            key = f"languages.{lang}.{exc.fields[0]}"
            raise FieldValueError(f"{key}: {exc}", key) from None

    def params_for(self, step: type[Step], lang: str | None) -> StepParams:
        """The parameters of a per-language ``step`` (not one with a section) for ``lang`` (a keyer: for every
        language)."""
        settings = self.defaults if issubclass(step, Keyer) else self.thresholds_for(lang)
        return step.Params.model_validate(settings.values_for(step))


def _sources_field() -> Any:
    """``sources_field()``, not in the settings key: each shard's own key names its file, format, fields and lang."""
    field = sources_field()
    return Field(min_length=1, description=field.description,
                 json_schema_extra={**field.json_schema_extra, "shard_key": False})


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
    strict: bool = Field(default=False, json_schema_extra=not_in_key(),
                         description="the first unreadable row is an error naming file:line")
    allow_empty: bool = Field(default=False, json_schema_extra=not_in_key(),
                              description="inputs that yield no document write an empty output (else: an error "
                                          "naming the files and the top reject reason)")
    max_removed_examples: int = Field(default=20, ge=0, description="examples per reason in removed.jsonl.zst")
    max_example_chars: int = Field(default=2000, ge=0, description="characters of text kept per example")
    keep_work: bool = Field(default=False, json_schema_extra=not_in_key(),
                            description="keep OUT/work (candidates, hashes, signatures) at the end")
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


def step_params(config: CleanConfig, step: type[Step], lang: str | None) -> StepParams:
    """The parameters of ``step`` for ``lang``: its section of ``config``, or its per-language settings."""
    if step.section is not None:
        params = getattr(config, step.section)
        assert isinstance(params, step.Params)  # a built-in's section is its Params
        return params
    return config.quality.params_for(step, lang)


def dedup_reasons(config: CleanConfig) -> tuple[str, ...]:
    """The reasons deduplication removes documents for, by reason code (``bloomdata.clean.dedup``): the built-in
    keyers', then those of the keyers of ``quality.steps``."""
    own = [cls.reason for cls in config.quality.step_classes() if issubclass(cls, Keyer) and cls not in KEYERS]
    return tuple(dict.fromkeys([*DEDUP_REASONS, *own]))


def removal_reasons(config: CleanConfig) -> tuple[str, ...]:
    """Every reason a clean run removes a document for, in step order: ``empty``, the built-in filters', those
    of the filters of ``quality.steps`` that are not built in, then deduplication's. Stable keys that the
    summary, the report and the removed examples use."""
    own = [cls for cls in config.quality.step_classes() if issubclass(cls, Filter) and cls not in FILTERS]
    filters = [r for cls in (*FILTERS, *own) for r in cls.reasons]
    return tuple(dict.fromkeys([EMPTY, *filters, *dedup_reasons(config)]))
