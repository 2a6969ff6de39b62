"""Fertility counts equal an independent count with the tokenizer, per language, with and without a second
tokenizer; languages written without spaces are flagged instead of given a meaningless per-word figure."""

from __future__ import annotations

import json

import pytest

from bloomdata import cli
from bloomdata.readers import SourceConfig, iter_documents
from bloomdata.tokenizer.bpe import load_tokenizer, save_tokenizer, train_from_texts
from bloomdata.tokenizer.fertility import ALL, fertility_table, to_markdown

LANGS = ("en", "hi", "zh")


def test_counts_match_direct_encoding(small_tokenizer_dir, corpus_dir):
    tok = load_tokenizer(small_tokenizer_dir)
    sources = [SourceConfig(paths=[str(corpus_dir / f"{lang}.jsonl")]) for lang in LANGS]
    rows = fertility_table(tok, sources, max_docs_per_lang=30)
    assert [r.lang for r in rows] == [*LANGS, ALL]
    for row in rows[:-1]:
        docs = [d.text for d in iter_documents([SourceConfig(paths=[str(corpus_dir / f"{row.lang}.jsonl")])])][:30]
        assert row.docs == 30
        assert row.tokens == sum(len(tok.encode(t).ids) for t in docs)
        assert row.words == sum(len(t.split()) for t in docs)
        assert row.chars == sum(len(t) for t in docs)
        assert row.tokens_per_char == pytest.approx(row.tokens / row.chars)
    by_lang = {r.lang: r for r in rows}
    assert by_lang["en"].tokens_per_word == pytest.approx(by_lang["en"].tokens / by_lang["en"].words)
    assert not by_lang["zh"].whitespace_words and by_lang["zh"].tokens_per_word is None
    assert by_lang[ALL].tokens == sum(r.tokens for r in rows[:-1])
    assert by_lang["en"].compare_tokens is None


def test_compare_with_a_second_tokenizer(small_tokenizer_dir, corpus_dir, tmp_path):
    tok = load_tokenizer(small_tokenizer_dir)
    bytes_only = train_from_texts(["a"], vocab_size=260)  # no merges: one token per UTF-8 byte
    sources = [SourceConfig(paths=[str(corpus_dir / "en.jsonl")])]
    rows = fertility_table(tok, sources, compare=bytes_only, max_docs_per_lang=10)
    en = rows[0]
    texts = [d.text for d in iter_documents(sources)][:10]
    assert en.compare_tokens == sum(len(t.encode("utf-8")) for t in texts)
    assert en.compare_tokens_per_char > en.tokens_per_char
    table = to_markdown(rows, "small", "bytes")
    assert table.splitlines()[0].startswith("| lang | docs | words | chars | small tokens")
    assert "bytes tokens" in table and "| en | 10 |" in table


def test_cli_markdown_and_json(small_tokenizer_dir, corpus_dir, tmp_path, capsys):
    other = save_tokenizer(train_from_texts(["a"], vocab_size=260), tmp_path / "bytes")
    out = tmp_path / "fertility.json"
    rc = cli.main(["fertility", "--tokenizer", str(small_tokenizer_dir), "--compare", str(other),
                   "--input", f"chinese={corpus_dir / 'zh.jsonl'}", "--input", str(corpus_dir / "sw.jsonl"),
                   "--max-docs", "5", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "| chinese | 5 |" in text and "| sw | 5 |" in text and "n/a" in text
    payload = json.loads(out.read_text())
    rows = {r["lang"]: r for r in payload["rows"]}
    assert set(rows) == {"chinese", "sw", ALL}
    assert rows["sw"]["tokens_per_word"] > 0 and rows["sw"]["compare_tokens"] > rows["sw"]["tokens"]
    # "chinese" is not an ISO code, so it is not known to be space-less; a real "zh" label is
    assert rows["chinese"]["whitespace_words"] is True
    rc = cli.main(["fertility", "--tokenizer", str(small_tokenizer_dir),
                   "--input", f"chinese={corpus_dir / 'zh.jsonl'}", "--input", str(corpus_dir / "sw.jsonl"),
                   "--compare", str(other), "--max-docs", "5", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out) == payload  # --json prints what --out writes
    rc = cli.main(["fertility", "--tokenizer", str(tmp_path / "nowhere"), "--input", str(corpus_dir)])
    assert rc == 2 and "tokenizer not found" in capsys.readouterr().err
