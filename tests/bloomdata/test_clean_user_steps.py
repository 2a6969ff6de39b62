"""A user's cleaning steps (issue 53): a filter, a modifier and a keyer written outside the package
(tests/bloomdata/clean_user_steps.py), named as module:Class in a clean config, run by `bloomdata clean` on two
Dask workers; their parameters set and checked like a built-in's, and a misspelt parameter of any step refused
in one line at its place in the config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import zstandard

from bloomdata.clean import REMOVED_FILE, CleanConfig
from bloomdata.clean.builtin import BUILTIN_FILTERS
from bloomdata.clean.quality_filter import QualityFilter
from bloomdata.clean.settings import parameters
from bloomdata.config_loader import load_config
from bloomdata.errors import BloomstackError
from tests.data import CORPUS_DIR

REPO = Path(__file__).resolve().parents[2]
MODULE = "tests.bloomdata.clean_user_steps"
DIGITS, DROP, OPENING = f"{MODULE}:Digits", f"{MODULE}:DropLines", f"{MODULE}:Opening"


def _documents() -> tuple[list[dict], dict[str, int]]:
    """Real English documents (three corpus sentences each), some made to meet each user step, and how many
    documents each step should remove."""
    sentences = [json.loads(line)["text"]
                 for line in (CORPUS_DIR / "en.jsonl").read_text(encoding="utf-8").splitlines()]
    texts = [" ".join(sentences[i:i + 3]) for i in range(0, 120, 3)]  # 40 documents
    texts[3] = "Advertisement: buy two, pay one\n" + texts[3] + "\nAdvertisement: today only"  # kept, without ads
    texts[5] = "Advertisement: buy two, pay one\nAdvertisement: today only"  # nothing left: empty
    digits = "Call 0123456789, 9876543210 or 5556667777 about the order 1112223333 shipped on 2024 07 01 to you now."
    texts[7], texts[11] = digits, digits.replace("Call", "Phone")
    opening = "In the early morning light"
    for i in (13, 17, 23):  # the same opening words, then different text: the first stays
        texts[i] = f"{opening} {texts[i]}"
    return [{"text": t, "lang": "en"} for t in texts], {"too_many_digits": 2, "empty": 1, "same_opening": 2}


def _config_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "clean.yaml"
    path.write_text(body, encoding="utf-8")
    return path


@pytest.mark.integration  # `bloomdata clean` in a subprocess, two Dask workers
def test_a_users_filter_modifier_and_keyer_run_on_two_dask_workers(tmp_path):
    rows, removals = _documents()
    source = tmp_path / "in" / "en.jsonl"
    source.parent.mkdir()
    source.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    config = _config_file(tmp_path, f"""\
sources: ['{source}']
out_dir: '{tmp_path / "out"}'
quality:
  steps: [{DROP}, words, chars, {DIGITS}, special_characters, closed_class_words, word_repetition, {OPENING}]
  defaults: {{max_digits: 0.15, opening_words: 5, drop_prefix: "Advertisement:"}}
""")
    proc = subprocess.run([sys.executable, "-m", "bloomdata.cli", "clean", "--config", str(config), "--workers", "2",
                           "--json", "--no-progress"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "clean_summary.json").read_text())
    assert summary["workers"] == 2
    assert {reason: summary["removed"][reason] for reason in removals} == removals
    assert summary["documents_kept"] == len(rows) - sum(summary["removed"].values())
    # the filter's reason among the filters', the keyer's after the built-in dedup reasons
    order = list(summary["removed"])
    assert order.index("perplexity") < order.index("too_many_digits") < order.index("exact_duplicate") \
        < order.index("near_duplicate") < order.index("same_opening")
    # the modifier's work is in the cleaned data
    data = zstandard.ZstdDecompressor().stream_reader((tmp_path / "out" / "data" / "en").glob("*.jsonl.zst").__next__()
                                                      .open("rb")).read()
    kept = [json.loads(line)["text"] for line in data.decode().splitlines()]
    assert rows[3]["text"].split("\n")[1] in kept and not any("Advertisement:" in t for t in kept)
    # the keyer's removals name the document they repeat
    examples = zstandard.ZstdDecompressor().stream_reader((tmp_path / "out" / REMOVED_FILE).open("rb")).read()
    same = [r for r in map(json.loads, examples.decode().splitlines()) if r["reason"] == "same_opening"]
    assert [(r["where"], r["duplicate_of"]) for r in same] == [(f"{source}:{n}", f"{source}:14") for n in (18, 24)]


def _error(tmp_path: Path, body: str) -> str:
    path = _config_file(tmp_path, body)
    with pytest.raises(BloomstackError) as err:
        load_config(CleanConfig, path, values={"sources": ["x"], "out_dir": "y"})
    message = str(err.value)
    assert "\n" not in message
    return message.removeprefix(f"{path}:")


@pytest.mark.parametrize("body, line, key, hint", [
    (f"quality:\n  steps: [{DIGITS}]\n  defaults:\n    max_digit: 0.1\n", 4, "quality.defaults.max_digit",
     "did you mean max_digits"),  # a user's filter
    (f"quality:\n  steps: [words, {DROP}]\n  languages:\n    en: {{drop_prefx: x}}\n", 4,
     "quality.languages.en.drop_prefx", "did you mean drop_prefix"),  # a user's modifier, per language
    (f"quality:\n  steps: [{OPENING}]\n  defaults: {{opening_word: 3}}\n", 3, "quality.defaults.opening_word",
     "did you mean opening_words"),  # a user's keyer
    ("quality:\n  defaults:\n    min_wrds: 3\n", 3, "quality.defaults.min_wrds", "did you mean min_words"),  # filter
    ("quality:\n  languages:\n    zh:\n      max_word_lenght: 3\n", 4, "quality.languages.zh.max_word_lenght",
     "did you mean max_word_length"),  # a built-in modifier with per-language parameters (ROOTS's word removal)
    ("normalize:\n  enabled: true\n  whitespaces: false\n", 3, "normalize.whitespaces", "whitespace"),  # modifier
    ("simhash:\n  windw: 5\n", 2, "simhash.windw", "window"),  # a built-in keyer
])
def test_a_misspelt_parameter_of_any_step_is_one_line_at_its_place(tmp_path, body, line, key, hint):
    message = _error(tmp_path, body)
    assert message.startswith(f"{line}: {key}: ") and hint in message, message


def test_step_names_are_checked_where_the_config_is_loaded(tmp_path):
    message = _error(tmp_path, "quality:\n  steps: [words, tests.nowhere:Step]\n")
    assert message.startswith("2: quality.steps") and "cannot import it" in message and "PYTHONPATH" in message
    message = _error(tmp_path, "quality:\n  steps: [bloomdata.clean.config:CleanConfig]\n")
    assert "not a subclass of bloomdata.clean.steps.Modifier, Filter or Keyer" in message
    message = _error(tmp_path, f"quality:\n  steps: [{OPENING}]\n  languages:\n    fr: {{opening_words: 2}}\n")
    assert message.startswith("4: quality.languages.fr.opening_words: a keyer's parameter holds for every language")


def test_two_steps_may_share_a_parameter_name(tmp_path):
    """``min_words`` is the built-in words filter's and the user's WordsPerLine's: one setting, validated by both
    (each with its own bounds), given to both."""
    shared = f"{MODULE}:WordsPerLine"
    assert [s.name for s in parameters([BUILTIN_FILTERS["words"], *load_config(
        CleanConfig, values={"sources": ["x"], "out_dir": "y", "quality": {"steps": [shared]}}
    ).quality.step_classes()])["min_words"]] == ["words", "words_per_line"]
    config = load_config(CleanConfig, values={"sources": ["x"], "out_dir": "y",
                                              "quality": {"steps": ["words", shared], "defaults": {"min_words": 4}}})
    quality = QualityFilter(config, {}, {})
    assert [(s.name, s.params.min_words) for s in quality.steps("en")] == [("words", 4), ("words_per_line", 4)]
    assert quality.check("one two three four five\nsix", "en") == "short_lines"  # 3 words a line
    message = _error(tmp_path, f"quality:\n  steps: [{shared}]\n  defaults:\n    min_words: 500\n")
    assert message.startswith("4: quality.defaults.min_words: Input should be less than or equal to 100")
