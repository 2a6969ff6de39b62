"""Alpha sampling: the probabilities follow n**alpha, quotas respect the budget and each language's size,
and the sample is a deterministic function of the seed and the text (not of file names or order)."""

from __future__ import annotations

import json

import pytest

from bloomdata.errors import BloomstackError
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.sampling import alpha_probabilities, byte_quotas, draw_sample


def _write_lang(path, lang, n_docs, doc_bytes, tag=""):
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n_docs):
            body = f"{lang}{tag} doc {i} "
            fh.write(json.dumps({"text": body + "x" * (doc_bytes - len(body)), "lang": lang}) + "\n")


def test_alpha_probabilities():
    sizes = {"big": 1000, "small": 10}
    assert alpha_probabilities(sizes, 1.0) == pytest.approx({"big": 1000 / 1010, "small": 10 / 1010})
    assert alpha_probabilities(sizes, 0.0) == pytest.approx({"big": 0.5, "small": 0.5})
    p = alpha_probabilities(sizes, 0.3)
    assert p["big"] / p["small"] == pytest.approx(100**0.3)
    assert sum(p.values()) == pytest.approx(1.0)
    assert alpha_probabilities({"a": 5, "none": 0}, 0.3) == {"a": 1.0}


def test_quotas_water_fill():
    sizes = {"a": 1_000_000, "b": 1_000, "c": 250_000}
    quotas = byte_quotas(sizes, 0.3, 100_000)
    p = alpha_probabilities(sizes, 0.3)
    assert quotas["b"] == 1_000, "a language smaller than its share gives all it has"
    assert sum(quotas.values()) == pytest.approx(100_000, abs=2)
    assert quotas["a"] / quotas["c"] == pytest.approx(p["a"] / p["c"], rel=1e-4), "excess shared by p"
    assert byte_quotas(sizes, 0.3, 10**9) == sizes, "budget above the corpus takes everything"


def test_drawn_bytes_follow_alpha(tmp_path):
    _write_lang(tmp_path / "big.jsonl", "big", 2000, 100)  # 200 KB
    _write_lang(tmp_path / "small.jsonl", "small", 200, 100)  # 20 KB
    sample = draw_sample([SourceConfig(paths=[str(tmp_path)])], alpha=0.3, byte_budget=20_000, seed=1)
    assert sample.sizes == {"big": 200_000, "small": 20_000}
    expected_ratio = 10**0.3  # (200 KB / 20 KB) ** 0.3 ~ 2.0, not 10
    assert sample.drawn["big"] / sample.drawn["small"] == pytest.approx(expected_ratio, rel=0.02)
    assert sum(sample.drawn.values()) <= 20_000
    assert all(sample.quotas[lang] - sample.drawn[lang] < 100 for lang in sample.drawn), "filled to one doc"
    assert sum(len(t.encode()) for t in sample.iter_texts()) == sum(sample.drawn.values())


def test_deterministic_for_seed_and_independent_of_file_order(tmp_path):
    for lang in ("en", "fr", "sw"):
        _write_lang(tmp_path / f"{lang}.jsonl", lang, 300, 80)
    sources = [SourceConfig(paths=[str(tmp_path / f"{lang}.jsonl")]) for lang in ("en", "fr", "sw")]
    one = draw_sample(sources, 0.3, 10_000, seed=5)
    assert one.texts == draw_sample(sources, 0.3, 10_000, seed=5).texts
    assert one.texts == draw_sample(sources[::-1], 0.3, 10_000, seed=5).texts
    other = draw_sample(sources, 0.3, 10_000, seed=6)
    assert set(one.texts["en"]) != set(other.texts["en"]), "another seed draws other documents"
    assert one.drawn == pytest.approx(other.drawn, abs=80)


def test_lang_from_config_and_unknown(tmp_path):
    (tmp_path / "x.jsonl").write_text('{"text": "no language here"}\n{"text": "nor here"}\n')
    assert set(draw_sample([SourceConfig(paths=[str(tmp_path)])], 0.3, 100, 0).texts) == {"und"}
    assert set(draw_sample([SourceConfig(paths=[str(tmp_path)], lang="sw")], 0.3, 100, 0).texts) == {"sw"}


def test_oversized_document_is_truncated_at_a_character(tmp_path):
    (tmp_path / "x.jsonl").write_text(json.dumps({"text": "é" * 1000, "lang": "fr"}) + "\n")
    sample = draw_sample([SourceConfig(paths=[str(tmp_path)])], 0.3, 101, 0)
    assert sample.texts["fr"] == ["é" * 50] and sample.drawn["fr"] == 100


def test_errors(tmp_path):
    (tmp_path / "empty.jsonl").write_text('{"text": ""}\n')
    with pytest.raises(BloomstackError, match="no documents"):
        draw_sample([SourceConfig(paths=[str(tmp_path)])], 0.3, 100, 0)
    with pytest.raises(BloomstackError, match="byte_budget"):
        draw_sample([SourceConfig(paths=[str(tmp_path)])], 0.3, 0, 0)
    with pytest.raises(BloomstackError, match="alpha"):
        alpha_probabilities({"a": 1}, -1)


def test_corpus_sample_covers_all_languages(corpus_dir):
    sample = draw_sample([SourceConfig(paths=[str(corpus_dir)])], 0.3, 300_000, seed=0)
    assert len(sample.texts) == 27
    p = sample.probabilities
    for lang in sample.drawn:  # every language within one document (~2 KB) of its quota
        assert 0 <= sample.quotas[lang] - sample.drawn[lang] < 3_000
        assert sample.quotas[lang] == pytest.approx(300_000 * p[lang], abs=1)
