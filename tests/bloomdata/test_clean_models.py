"""The model-based steps with real models the tests make: a sentencepiece model trained here (zh words,
perplexity tokenisation), a fastText language-id model trained here, and a KenLM model written here as an
ARPA file (KenLM's Python module reads models; it cannot train them). Expected values are worked out from
ROOTS's filtering.py (its normalization before sentencepiece, its perplexity formula and rounding)."""

from __future__ import annotations

import json
import math

import pytest

from bloomdata.clean.config import PRESETS, CleanConfig
from bloomdata.clean.lang_models import check_models, perplexity, perplexity_model, sentencepiece_model
from bloomdata.clean.language import load_word_lists
from bloomdata.clean.quality_filter import QualityFilter
from bloomdata.config_loader import load_config
from tests.data import CORPUS_DIR

# KenLM reads bigram models and up; backoff weights 0 and one bigram equal to its unigram: every score below is
# the sum of unigram log10 probabilities
ARPA = """\\data\\
ngram 1=6
ngram 2=1

\\1-grams:
-3.0\t<unk>\t0
-99\t<s>\t0
-1.0\t</s>\t0
-0.5\tthe\t0
-1.0\tcat\t0
-0.25\t\u2581the\t0

\\2-grams:
-0.5\t<s> the

\\end\\
"""


def _texts(lang: str, n: int) -> list[str]:
    with open(CORPUS_DIR / f"{lang}.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f][:n]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import fasttext
    import sentencepiece

    root = tmp_path_factory.mktemp("models")
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(_texts("zh", 60)), model_prefix=str(root / "zh"), vocab_size=2000,
        hard_vocab_limit=False, character_coverage=1.0, model_type="unigram", num_threads=1, minloglevel=2)
    train = root / "lid.txt"
    train.write_text("".join(f"__label__{lang} {t.lower()}\n" for lang in ("en", "fr") for t in _texts(lang, 80)),
                     encoding="utf-8")
    lid = fasttext.train_supervised(str(train), epoch=30, lr=1.0, dim=16, minn=2, maxn=4, thread=1, verbose=0)
    lid.save_model(str(root / "lid.bin"))
    (root / "en.arpa").write_text(ARPA, encoding="utf-8")
    return root


def roots_config(**values) -> CleanConfig:
    return check_models(load_config(CleanConfig, PRESETS["roots"], values={"sources": ["x"], "out_dir": "y", **values}))


def test_zh_words_are_sentencepiece_pieces_of_roots_normalized_text(models, monkeypatch):
    config = roots_config(sentencepiece={"models": {"zh": str(models / "zh.model")}})
    quality = QualityFilter(config, *load_word_lists(config.quality))
    sp = sentencepiece_model(str(models / "zh.model"))
    seen = []
    monkeypatch.setattr(type(sp), "encode_as_pieces", lambda self, text: seen.append(text) or [text[:2], "▁", "，x"])
    doc = quality.document("ABC 2011年，我们\u3000\x01好", "zh")
    # ROOTS lower-cases, makes digits 0, its whitespace spaces and "，" ","; non-printing characters go
    assert doc.words == ["ab", "▁", "x"] and seen == ["abc 0000年,我们 好"]
    assert doc.text == "ABC 2011年，我们 \x01好"  # the kept text has ROOTS's document modifications only
    monkeypatch.undo()
    kept = [quality.check(t, "zh") for t in _texts("zh", 40)]
    assert kept.count(None) == 40  # tests/data/corpus's zh is clean prose: ROOTS keeps it (146 of 146 measured)
    without = roots_config()
    per_character = QualityFilter(without, *load_word_lists(without.quality)).document("我们的2011年!", "zh")
    assert per_character.words == ["我", "们", "的", "年"]  # no model: one word per character


def test_perplexity_is_roots_formula_on_a_kenlm_model(models):
    model = perplexity_model(str(models / "en.arpa"))
    # "the cat": log10 P = -0.5 - 1.0 - 1.0 (</s>) over 2 words + 1 -> 10 ** (2.5 / 3)
    assert perplexity(model, "the cat") == pytest.approx(10 ** (2.5 / 3))
    assert perplexity(model, "the cat\nthe dog") == pytest.approx(10 ** ((2.5 + 4.5) / 6))  # dog is <unk>: -3
    config = roots_config(perplexity={"models": {"en": str(models / "en.arpa")}},
                          quality={"languages": {"en": {"max_perplexity": 7.0, "min_words": 1,
                                                        "min_closed_class": None}}})
    quality = QualityFilter(config, *load_word_lists(config.quality))
    assert quality.check("the cat", "en") is None and quality.check("the dog", "en") == "perplexity"


def test_perplexity_with_sentencepiece_scores_normalized_pieces_rounded(models, monkeypatch):
    sp = sentencepiece_model(str(models / "zh.model"))
    model = perplexity_model(str(models / "en.arpa"))
    lines = []
    monkeypatch.setattr(type(sp), "encode_as_pieces", lambda self, text: lines.append(text) or ["▁the", "cat"])
    # ROOTS: the text normalized (not lower-cased, digits 0) and tokenised, pieces joined by spaces, rounded to 0.1
    assert perplexity(model, "The 42 cats", sp) == round(10 ** (2.25 / 3), 1) == 5.6  # -0.25 - 1 - 1 over 3
    assert lines == ["The 00 cats"]


def test_language_id_with_a_trained_fasttext_model(models):
    config = roots_config(lang_id={"model": str(models / "lid.bin")})
    quality = QualityFilter(config, *load_word_lists(config.quality))
    en, fr = _texts("en", 3), _texts("fr", 3)
    assert [quality.check(t, "en") for t in en] == [None] * 3
    assert [quality.check(t, "fr") for t in fr] == [None] * 3
    assert [quality.check(t, "fr") for t in en] == ["closed_class_words"] * 3  # ROOTS checks stopwords first
    config = roots_config(lang_id={"model": str(models / "lid.bin")},
                          quality={"languages": {"fr": {"min_closed_class": None}}})
    quality = QualityFilter(config, *load_word_lists(config.quality))
    assert [quality.check(t, "fr") for t in en] == ["lang_id"] * 3  # top label en is not fr
    assert math.isclose(config.quality.thresholds_for("fr").min_lang_id_score, 0.8)  # ROOTS's fr cutoff
