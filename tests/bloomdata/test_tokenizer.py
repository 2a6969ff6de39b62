"""The trained tokenizer is BLOOM's configuration, loads in transformers, and is lossless for every script,
including scripts it never saw in training."""

from __future__ import annotations

import hashlib
import json
import re
import sys

import pytest
from tokenizers import Tokenizer, models

from bloomdata import cli
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomdata.readers import SourceConfig, iter_documents
from bloomdata.tokenizer.bpe import (
    SPECIAL_TOKENS,
    TokenizerTrainConfig,
    check_budget,
    eod_id,
    load_tokenizer,
    save_tokenizer,
    tokenizer_identity,
    train_from_texts,
    train_tokenizer,
)

# Independent check of the split (docs/tokenizer.md, "The split pattern"): the 39 code points BLOOM's
# Oniguruma class excludes, written out for Python's `re`; unmatched gaps are pieces of their own ("Isolated").
_EXCLUDED = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
             "!(),.?|\u2026\u3001\u3002\uff0c\u0964\u06d4\u060c")
_PIECE = re.compile(f" ?[^{_EXCLUDED}]+")
LATIN_ONLY = ["ca", "en", "es", "eu", "fr", "id", "lg", "pt", "sn", "st", "sw", "tn", "ts", "vi", "xh", "yo", "zu"]


def _reference_split(text: str) -> list[str]:
    pieces, at = [], 0
    for m in _PIECE.finditer(text):
        if m.start() > at:
            pieces.append(text[at:m.start()])
        pieces.append(m.group())
        at = m.end()
    return pieces + ([text[at:]] if at < len(text) else [])


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (what ByteLevel emits)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, extra = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def test_config_matches_bloom(small_tokenizer_dir):
    spec = json.loads((small_tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    assert spec["normalizer"] is None
    assert spec["pre_tokenizer"] == {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": " ?[^(\\s|[.,!?…。，、।۔،])]+"}, "behavior": "Isolated",
         "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
    ]}
    assert spec["decoder"]["type"] == "ByteLevel"
    assert spec["post_processor"]["type"] == "ByteLevel" and spec["post_processor"]["trim_offsets"] is False
    assert spec["model"]["type"] == "BPE" and spec["model"]["byte_fallback"] is False
    assert [(t["id"], t["content"], t["special"]) for t in spec["added_tokens"]] == [
        (i, t, True) for i, t in enumerate(SPECIAL_TOKENS)]
    vocab = spec["model"]["vocab"]
    assert set(_bytes_to_unicode().values()) <= set(vocab), "every byte must be a token"
    assert len(vocab) == 3000
    report = json.loads((small_tokenizer_dir / "training_report.json").read_text(encoding="utf-8"))
    assert len(report["languages"]) == 27 and report["alpha"] == 0.3 and report["seed"] == 0
    assert 0 < report["total_bytes_drawn"] <= 1_000_000 and report["vocab_size"] == 3000


def test_split_matches_the_39_code_point_rule(small_tokenizer_dir):
    tok = load_tokenizer(small_tokenizer_dir)
    chars = [chr(c) for c in range(0x10000) if not 0xD800 <= c <= 0xDFFF] + ["😀", "\U0001f1eb\U0001f1f7"]
    text = "".join(f"x{c} {c}{c}y " for c in chars) + "don't stop (there) [x]\n\n  def 你好，世界。"
    byte_map = _bytes_to_unicode()
    expected = ["".join(byte_map[b] for b in p.encode("utf-8")) for p in _reference_split(text)]
    assert [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(text)] == expected
    assert _reference_split("Hello, world!\n\n  def") == ["Hello", ",", " world", "!\n\n ", " def"]


def test_loads_in_transformers(small_tokenizer_dir, corpus_dir):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(small_tokenizer_dir))
    tok = Tokenizer.from_file(str(small_tokenizer_dir / "tokenizer.json"))
    assert (hf.padding_side, hf.eos_token_id, hf.bos_token_id, hf.pad_token_id, hf.unk_token_id) == ("left", 2, 1, 3, 0)
    for doc in list(iter_documents([SourceConfig(paths=[str(corpus_dir / "hi.jsonl")])]))[:5]:
        ids = hf(doc.text)["input_ids"]
        assert ids == tok.encode(doc.text).ids, "transformers adds no BOS/EOS, like BLOOM"
        assert hf.decode(ids) == doc.text


def test_lossless_for_unseen_scripts(tmp_path, corpus_dir):
    """Trained on Latin-script languages only; every document of all 27 languages still round-trips."""
    out = tmp_path / "latin"
    train_tokenizer(TokenizerTrainConfig(
        sources=[SourceConfig(paths=[str(corpus_dir / f"{lang}.jsonl")]) for lang in LATIN_ONLY],
        out_dir=str(out), vocab_size=2000, byte_budget=300_000, show_progress=False))
    assert set(json.loads((out / "training_report.json").read_text())["languages"]) == set(LATIN_ONLY)
    tok = load_tokenizer(out)
    docs = list(iter_documents([SourceConfig(paths=[str(corpus_dir)])]))
    assert len({d.lang for d in docs}) == 27
    texts = [d.text for d in docs] + ["\x00\x1c\x1f\r\n\t", "e\u0301 \u200d👩‍👩‍👧 \U0010fffd", "  ", "ÿ" * 50]
    encodings = tok.encode_batch(texts)
    assert all(0 not in e.ids for e in encodings), "<unk> must never appear"
    assert tok.decode_batch([e.ids for e in encodings]) == texts
    per_byte = {}  # tokens per UTF-8 byte: unseen scripts fall back to single bytes (~1), never <unk>
    for doc, enc in zip(docs, encodings):
        n_tok, n_byte = per_byte.get(doc.lang, (0, 0))
        per_byte[doc.lang] = (n_tok + len(enc.ids), n_byte + len(doc.text.encode("utf-8")))
    assert per_byte["zh"][0] / per_byte["zh"][1] > 0.9 and per_byte["ta"][0] / per_byte["ta"][1] > 0.9
    assert per_byte["en"][0] / per_byte["en"][1] < 0.6, "seen scripts get merges"


def test_training_is_deterministic(tmp_path, corpus_dir):
    def train(out):
        train_tokenizer(TokenizerTrainConfig(
            sources=[SourceConfig(paths=[str(corpus_dir / "en.jsonl"), str(corpus_dir / "zh.jsonl")])],
            out_dir=str(out), vocab_size=600, byte_budget=60_000, seed=7, show_progress=False))
        return tokenizer_identity(out)

    assert train(tmp_path / "a") == train(tmp_path / "b")


def test_library_api(small_tokenizer_dir, tmp_path):
    tok = load_tokenizer(small_tokenizer_dir)
    assert eod_id(tok) == 2
    file = small_tokenizer_dir / "tokenizer.json"
    assert tokenizer_identity(small_tokenizer_dir) == tokenizer_identity(file)
    assert tokenizer_identity(file) == hashlib.sha256(file.read_bytes()).hexdigest()
    with pytest.raises(BloomstackError, match="tokenizer not found: .*missing.*train-tokenizer"):
        load_tokenizer(tmp_path / "missing")
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(BloomstackError, match="not a valid tokenizer.json"):
        load_tokenizer(tmp_path)
    with pytest.raises(BloomstackError, match="no </s> token"):
        eod_id(Tokenizer(models.BPE()))
    other = save_tokenizer(train_from_texts(["some other text"] * 10, vocab_size=300), tmp_path / "other")
    assert tokenizer_identity(other) != tokenizer_identity(small_tokenizer_dir)


def test_budget_guard():
    config = TokenizerTrainConfig(sources=[SourceConfig(paths=["x"])], out_dir="o", byte_budget=600_000_000,
                                  trainer="memory")
    with pytest.raises(BloomstackError, match="~18 GB of RAM.*set allow_large_budget"):
        check_budget(config)
    with pytest.warns(UserWarning, match="exceeds"):
        check_budget(derive(config, allow_large_budget=True))


def test_cli_inputs_and_config(tmp_path, corpus_dir, capsys):
    out = tmp_path / "tok"
    rc = cli.main(["train-tokenizer", "--input", f"kiswahili={corpus_dir / 'sw.jsonl'}", "--input",
                   str(corpus_dir / "yo.jsonl"), "--out", str(out), "--vocab-size", "500", "--byte-budget",
                   "40KB", "--seed", "3", "--quiet"])
    assert rc == 0 and "wrote" in capsys.readouterr().out
    report = json.loads((out / "training_report.json").read_text())
    assert report["languages"] == ["kiswahili", "yo"] and report["seed"] == 3
    assert report["total_bytes_drawn"] <= 40_000
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (out / name).is_file()
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BloomTokenizerFast" and config["clean_up_tokenization_spaces"] is False

    yaml_path = tmp_path / "tok.yaml"
    yaml_path.write_text(f"sources:\n  - paths: ['{corpus_dir / 'en.jsonl'}']\nvocab_size: 400\n"
                         f"byte_budget: 20000\nout_dir: {tmp_path / 'from_yaml'}\nshow_progress: false\n")
    assert cli.main(["train-tokenizer", "--config", str(yaml_path)]) == 0
    assert json.loads((tmp_path / "from_yaml" / "training_report.json").read_text())["vocab_size"] <= 400

    yaml_path.write_text("sources: []\nvocab_sise: 3\n")
    assert cli.main(["train-tokenizer", "--config", str(yaml_path), "--input", "nope.jsonl", "--out", "x"]) == 2
    err = capsys.readouterr().err
    assert "vocab_sise" in err and err.count("\n") == 1
    assert cli.main(["train-tokenizer", "--input", str(tmp_path / "absent.jsonl"), "--out", "x"]) == 2
    assert "input path not found" in capsys.readouterr().err


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
