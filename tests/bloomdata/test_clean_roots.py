"""The roots preset against BigScience's ROOTS filtering (bigscience-workshop/data-preparation at 9d05884,
preprocessing/training/01b_oscar_cleaning_and_filtering/): its parameters, word lists, text handling and
decisions, value by value.

Expected outputs are worked out from reading ROOTS's filtering.py (never copied); the corpus-level figures
were measured by running filtering.py as published (language id and perplexity off) outside the repository
on tests/data/corpus: it removes the documents pinned in ROOTS_REMOVED and keeps texts whose digest is
ROOTS_KEPT_DIGEST.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import yaml

from bloomdata.clean import roots
from bloomdata.clean.builtin import BUILTIN_FILTERS
from bloomdata.clean.config import PRESETS, ROOTS_STEPS, CleanConfig
from bloomdata.clean.language import load_word_lists
from bloomdata.clean.measures import word_ratio
from bloomdata.clean.quality_filter import QualityFilter
from bloomdata.clean.steps import Filter
from bloomdata.clean.text import roots_remove_words, roots_words
from bloomdata.cli.clean import parser
from bloomdata.config_loader import derive, load_config
from tests.bloomdata.roots_reference import roots_language_settings
from tests.data import CORPUS_DIR

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMMIT = "9d0588419073cc5bf0fb92b58f37f2a1016572c3"
LANGS12 = ("ar", "bn", "ca", "en", "es", "eu", "fr", "hi", "id", "pt", "ur", "vi")

# Lines of tests/data/corpus/<lang>.jsonl that ROOTS's filtering.py removes (measured, see the docstring).
ROOTS_REMOVED = {
    "ar": [], "en": [], "fr": [], "id": [], "vi": [], "pt": [154], "eu": [10, 85, 86, 125],
    "bn": [2, 3, 4, 6, 9, 10, 11, 12, 20, 23, 25, 26, 32, 33, 34, 36, 37, 38, 40, 42, 43, 44, 45, 46, 47, 48, 49, 50,
           51, 55, 57, 58, 59, 60, 63, 65, 67, 68, 69, 76, 77, 78, 79, 81, 88, 93, 94, 97, 98, 102, 104, 105, 107, 109,
           110, 111, 116, 118, 120, 123, 127, 128, 129, 130, 132, 136, 138, 139, 142, 143, 145, 146, 147, 149, 150,
           151, 154, 156, 158, 160],
    "ca": [8, 31, 36, 41, 43, 49, 59, 73, 74, 80, 93, 94, 122, 139, 146],
    "es": [13, 24, 27, 32, 33, 34, 35, 36, 49, 57, 112, 118, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134,
           135, 136, 147, 148, 150, 151, 155, 156, 157],
    "hi": [19, 29, 51, 72, 82, 86, 92, 102, 114, 122, 126, 127, 146, 149],
    "ur": [3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 19, 20, 23, 77, 87, 126, 128, 136, 149],
}
# sha256 (first 16 hex digits) of ROOTS's modified texts of the documents it keeps, each followed by a NUL.
ROOTS_KEPT_DIGEST = {
    "ar": "a4fcf145726d19a5", "bn": "3e8cb4bcb7728943", "ca": "0df703dc4a83fec5", "en": "5d7746367b28e658",
    "es": "ff4e73040f41fdde", "eu": "9a41b6156d307010", "fr": "24ab2238d7c08259", "hi": "3c4de86606fdd6f6",
    "id": "c591e4a1b902d2aa", "pt": "6d5571e2d58573ad", "ur": "0c28dcdfa8d38f96", "vi": "2a7e95620c1c5d64",
}


def preset(name: str = "roots", **values) -> CleanConfig:
    return load_config(CleanConfig, PRESETS[name], values={"sources": ["x"], "out_dir": "y", **values})


@pytest.fixture(scope="module")
def roots_filter() -> QualityFilter:
    config = preset()
    return QualityFilter(config, *load_word_lists(config.quality))


def test_preset_holds_every_parameter_of_parameters_filtering():
    record = roots.load("parameters_filtering")
    assert record["source"]["commit"] == COMMIT and record["source"]["license"].startswith("Apache-2.0")
    params = record["parameters"]
    assert sorted(params) == sorted(["default", *roots.LANGUAGES])
    config = preset()
    assert config.quality.defaults.model_dump() == roots_language_settings(params["default"])
    for lang in roots.LANGUAGES:
        assert config.quality.thresholds_for(lang).model_dump() == roots_language_settings(params[lang]), lang
    assert config.quality.thresholds_for("sw") == config.quality.defaults  # every other language: `default`
    assert config.quality.thresholds_for("zh").char_repetition_n == 3
    assert config.quality.thresholds_for("vi").word_augmentation == [2]
    assert config.quality.thresholds_for("ur").word_repetition_n == 7
    assert config.quality.steps == list(ROOTS_STEPS)
    assert (config.quality.words, config.quality.special_characters, config.quality.word_lists) == ("roots",) * 3
    assert config.normalize.roots_whitespace and not config.normalize.controls and not config.normalize.whitespace
    header = open(PRESETS["roots"], encoding="utf-8").read().split("\nnormalize:")[0]
    for fact in ("bigscience-workshop/data-preparation", COMMIT,
                 "01b_oscar_cleaning_and_filtering/parameters_filtering.py", "Apache-2.0"):
        assert fact in header
    assert os.path.samefile(os.path.join(REPO, "configs", "clean", "roots.yaml"), PRESETS["roots"])
    assert yaml.safe_load(open(PRESETS["default"])) == {}


def test_cli_preset_is_the_shipped_config_file(tmp_path):
    args = ["--input", "x.jsonl", "--out", str(tmp_path)]
    by_name, _ = parser().parse([*args, "--preset", "roots"])
    by_file, _ = parser().parse([*args, "--config", os.path.join(REPO, "configs", "clean", "roots.yaml")])
    assert by_name == by_file and by_name.quality.words == "roots"
    assert parser().parse([*args, "--preset", "default"])[0] == parser().parse(args)[0]
    with pytest.raises(Exception, match="--preset roots and --config"):
        parser().parse([*args, "--preset", "roots", "--config", PRESETS["roots"]])


def test_word_lists_ship_with_their_source():
    for name, low, high in (("stopwords", 59, 1567), ("flagged_words", 68, 127)):
        data = roots.load(name)
        assert data["source"]["path"].endswith(f"01b_oscar_cleaning_and_filtering/{name}.py")
        assert data["source"]["commit"] == COMMIT and "Apache-2.0" in data["source"]["license"]
        sizes = {lang: len(words) for lang, words in data["words"].items()}
        assert sorted(sizes) == sorted(roots.LANGUAGES) and min(sizes.values()) == low and max(sizes.values()) == high
    closed, flagged = load_word_lists(preset().quality)
    assert "the" in closed["en"] and "porn" in flagged["en"] and "ai nấy" in closed["vi"]
    assert "Anda" in closed["id"]  # as published: ROOTS never lower-cases its lists (this entry never matches)
    assert closed["sw"] and "sw" not in flagged  # other languages keep the bloomstack closed-class lists
    assert len(roots.special_characters()) == 1599 and "\u093e" in roots.special_characters()


# Documents and what ROOTS's filtering.py makes of them (modified text, kept?), worked out from its code.
MODIFIED = [
    # strip, split on newline / tab / space and merge without empty words, fields or lines
    ("  Hello   world\t\tthere\n\n \nagain  ", "Hello world\tthere\nagain"),
    # words holding http, www, .com, href or // after stripping go; the test is case-sensitive
    ("Read http://a.com and (www.b.org) or WWW.C.ORG, then foo//bar and a.com.", "Read and or WWW.C.ORG, then and"),
    # en cuts words over 25 characters unless stripping brings them to 25; all-special words go
    ("x " + "a" * 26 + " (" + "b" * 25 + ") " + "." * 30 + " " + "c" * 25 + " y",
     "x (" + "b" * 25 + ") " + "c" * 25 + " y"),
    # its 12 whitespace characters (NBSP, U+3000, U+FFFC, the C1 control U+0084...) are spaces; other controls stay
    ("a\u00a0b\u3000c\ufffcd\x84e x\x01y", "a b c d e x\x01y"),
]


@pytest.mark.parametrize(("text", "expected"), MODIFIED)
def test_document_modifications_as_roots(roots_filter, text, expected):
    assert roots_filter.document(text, "en").text == expected


SENTENCE = "the cat and the dog sat on the mat in the house of the man who was at the door"  # 20 words


@pytest.mark.parametrize(("text", "reason"), [
    (SENTENCE, None),
    (SENTENCE.removesuffix(" door"), "too_few_words"),  # en needs 20
    # ROOTS counts words stripped but not lower-cased: "Г" is in its special characters ("г" is not)
    (SENTENCE.removesuffix(" door") + " Г", "too_few_words"),
    (SENTENCE.replace(" man ", " porn man "), "flagged_words"),  # 1/21 > 0.01
    ("ab1 " * 40, "char_repetition"),  # fails special characters too: ROOTS checks repetition first
    ("Lorem ipsum dolor sit amet consectetur " * 6, "char_repetition"),
])
def test_decisions_and_reasons_in_roots_order(roots_filter, text, reason):
    assert roots_filter.check(text, "en") == reason


def test_default_preset_keeps_its_order_and_rules():
    config = preset("default")
    quality = QualityFilter(config, *load_word_lists(config.quality))
    assert quality.check("ab1 " * 40, "en") == "special_characters"
    assert config.quality.words == "units" and config.quality.special_characters == "categories"


def test_roots_words_strip_its_named_set():
    # ROOTS's set holds Devanagari vowel signs U+093E (ा) and U+0940 (ी), not U+093F (ि): a category rule
    # would strip none of them
    assert roots_words("का की कि") == ["क", "क", "कि"]
    assert roots_words("«Bonjour», dit-il… 2011 😀 ✓ “ok”") == ["bonjour", "dit-il", "ok"]
    assert roots_words("我们的2011年!", per_character=True) == ["我", "们", "的", "年"]  # zh without its model
    assert roots_words("tab\tnew\nline  x\x0by") == ["tab", "new", "line", "x\x0by"]  # only space, tab, newline split
    assert roots_remove_words("a\t\tb \n\n c", None, 5) == "a\tb\nc"


def test_bigram_augmentation_counts_runs_and_caps_at_one():
    assert word_ratio(["ai", "nấy", "x"], frozenset({"ai", "ai nấy"}), (2,), " ") == pytest.approx(2 / 3)
    assert word_ratio(["ai", "ai"], frozenset({"ai", "ai ai"}), (2,), " ") == 1.0  # 3 of 2, capped


def test_steps_are_listed_classes():
    assert set(ROOTS_STEPS) <= set(BUILTIN_FILTERS)
    for name, cls in BUILTIN_FILTERS.items():
        assert issubclass(cls, Filter) and cls.name == name and cls.measures and cls.reasons
    config = preset()
    steps = QualityFilter(config, *load_word_lists(config.quality)).steps("en")
    assert [s.name for s in steps] == list(ROOTS_STEPS[:6])  # no lang-id or KenLM model given


@pytest.mark.parametrize("lang", LANGS12)
def test_agreement_with_roots_on_the_corpus(roots_filter, lang):
    removed, digest = [], hashlib.sha256()
    with open(CORPUS_DIR / f"{lang}.jsonl", encoding="utf-8") as f:
        for line, row in enumerate(map(json.loads, f), 1):
            doc = roots_filter.document(row["text"], lang)
            if roots_filter.reason(doc) is None:
                digest.update(doc.text.encode() + b"\0")
            else:
                removed.append(line)
    assert removed == ROOTS_REMOVED[lang]
    assert digest.hexdigest()[:16] == ROOTS_KEPT_DIGEST[lang]


def _settings_key(config: CleanConfig) -> str:
    from bloomdata import durable
    from bloomdata.clean.run import filter_settings

    return durable.content_key(filter_settings(config, *load_word_lists(config.quality)))


def test_shard_key_holds_every_setting_but_the_opted_out(tmp_path):
    base = preset()
    key = _settings_key(base)
    changed = {"simhash": {"window": 7}, "template_dedup": {"min_occurrences": 3}, "pii": {"users": False},
               "quality": {"steps": ["words"]}, "normalize": {"roots_punctuation": True},
               "exact_dedup": {"key": "text"}, "max_removed_examples": 3}
    for field, value in changed.items():
        update = {**base.model_dump()[field], **value} if isinstance(value, dict) else value
        assert _settings_key(derive(base, **{field: type(getattr(base, field)).model_validate(update)
                                                     if isinstance(value, dict) else update})) != key, field
    for field, value in {"workers": 7, "progress": False, "keep_work": True, "settings_name": "x",
                         "out_dir": str(tmp_path), "max_rows_per_shard": 5}.items():
        assert _settings_key(derive(base, **{field: value})) == key, field
    from bloomdata.clean.config import shard_settings

    sections = [name for name, info in CleanConfig.model_fields.items()
                if not (isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("shard_key") is False)]
    assert list(shard_settings(base, lambda path: path)) == sections  # a new section is in the key by default


def test_a_misspelt_step_is_a_one_line_error_naming_the_key(tmp_path):
    bad = tmp_path / "clean.yaml"
    bad.write_text("quality:\n  steps: [words, char_repetiton]\n", encoding="utf-8")
    with pytest.raises(Exception) as err:
        load_config(CleanConfig, bad, values={"sources": ["x"], "out_dir": "y"})
    message = str(err.value)
    assert "\n" not in message and "quality.steps" in message and "char_repetition" in message
    assert "clean.yaml" in message
