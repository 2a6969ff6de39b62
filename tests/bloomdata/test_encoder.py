"""bloomdata's encoder (bloomdata/tokenizer/encoder.py, csrc/bpe/encoder.h) gives HF tokenizers' ids exactly.

Oracle: ``Tokenizer.encode_batch_fast(texts, add_special_tokens=False)`` of the same tokenizer.json. Three
vocabularies: the bloomdata tests' 3,000-token tokenizer, the demo's (8,000 tokens, trained as `bloomdata demo`
trains it) and a BLOOM-size one (250,680 tokens, tests/bloomdata/encoder_vocab.py). Texts: every language file
of the test corpus, seeded random Unicode strings (every plane, the split's 39 code points, whitespace runs,
special tokens inside the text, words of up to 20,000 bytes) and a property test of seeded draws.
"""

from __future__ import annotations

import functools
import json
import random
import warnings
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, normalizers

from bloomdata.tokenizer.bpe import load_tokenizer, save_tokenizer
from bloomdata.tokenizer.encoder import BloomEncoder, HFEncoder, load_encoder, unsupported
from bloomdata.tokenizer.split import EXCLUDED, excluded_code_points
from tests.bloomdata.encoder_vocab import BLOOM_SIZE, bloom_size_tokenizer

pytest.importorskip("bloomdata._bpe_encoder", reason="the C++ encoder is built by setup.py (make install)")

DEMO_VOCAB = 8000  # bloomdata.cli.demo's default


def _texts(path: Path) -> list[str]:
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def corpus_texts(corpus_dir) -> dict[str, list[str]]:
    return {f.stem: _texts(f) for f in sorted(corpus_dir.glob("*.jsonl"))}


@pytest.fixture(scope="module")
def demo_tokenizer_dir(tmp_path_factory, corpus_dir) -> Path:
    """The demo's tokenizer: `bloomdata demo`'s training call on the test corpus."""
    from bloomdata.readers import SourceConfig
    from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer

    out = tmp_path_factory.mktemp("demo_tokenizer")
    train_tokenizer(TokenizerTrainConfig(sources=[SourceConfig(paths=[str(corpus_dir)])], out_dir=str(out),
                                         vocab_size=DEMO_VOCAB, show_progress=False))
    return out


@pytest.fixture(scope="module")
def bloom_size_dir(tmp_path_factory, corpus_texts) -> Path:
    out = tmp_path_factory.mktemp("bloom_size_tokenizer")
    save_tokenizer(bloom_size_tokenizer([t for texts in corpus_texts.values() for t in texts]), out)
    return out


@pytest.fixture(scope="module", params=["small", "demo", "bloom_size"])
def tokenizer_dir(request) -> Path:
    name = {"small": "small_tokenizer_dir", "demo": "demo_tokenizer_dir", "bloom_size": "bloom_size_dir"}
    return request.getfixturevalue(name[request.param])


def _hf_ids(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    return [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]


@functools.cache
def _pair(tokenizer_dir: Path) -> tuple[BloomEncoder, Tokenizer]:
    """The C++ encoder and HF's tokenizer of a directory, loaded once (the BLOOM-size one takes seconds)."""
    encoder = load_encoder(tokenizer_dir)
    assert isinstance(encoder, BloomEncoder), "a BLOOM-configured tokenizer takes the C++ encoder"
    return encoder, load_tokenizer(tokenizer_dir)


def _assert_same(tokenizer_dir: Path, texts: list[str], what: str) -> None:
    encoder, hf = _pair(tokenizer_dir)
    expected = _hf_ids(hf, texts)
    got = encoder.encode_batch(texts)
    assert len(got) == len(texts)
    for i, (ids, want) in enumerate(zip(got, expected)):
        assert ids.dtype == np.uint32
        assert ids.tolist() == want, f"{what}: text {i} ({texts[i][:60]!r}) differs from HF's ids"


def test_vocabulary_sizes(small_tokenizer_dir, demo_tokenizer_dir, bloom_size_dir):
    sizes = [load_tokenizer(d).get_vocab_size() for d in (small_tokenizer_dir, demo_tokenizer_dir, bloom_size_dir)]
    assert sizes == [3000, DEMO_VOCAB, BLOOM_SIZE]


def test_corpus_ids_identical(tokenizer_dir, corpus_texts):
    """Every language file of the test corpus (27 languages, 4,306 documents), whole documents."""
    _assert_same(tokenizer_dir, [t for texts in corpus_texts.values() for t in texts], "corpus")
    for lang in ("zh", "ar", "hi", "ta"):  # one language per batch too: the cache then holds one script
        _assert_same(tokenizer_dir, corpus_texts[lang], lang)


# --- random Unicode ---------------------------------------------------------------------------------------

SPECIALS = ("<unk>", "<s>", "</s>", "<pad>", "</s", "<s", "<<s>>", "</s></s>")
WHITESPACE = "".join(chr(c) for c in excluded_code_points() if chr(c).isspace()) + "\x1c\x1d\x1e\x1f\u200b"


def _code_point(rng: random.Random) -> str:
    """One code point: any plane (0-16, no surrogate), a split code point, ASCII or a frequent script."""
    kind = rng.random()
    if kind < 0.25:
        plane = rng.randrange(17)
        c = rng.randrange(plane << 16, (plane + 1) << 16)
        return chr(c) if not 0xD800 <= c < 0xE000 else "\ufffd"
    if kind < 0.4:
        return rng.choice(EXCLUDED.replace("-", ""))
    if kind < 0.7:
        return chr(rng.randrange(0x20, 0x7F))
    first, count = rng.choice([(0x4E00, 2000), (0x0627, 30), (0x0915, 40), (0x0E01, 46), (0x0430, 32), (0x1F600, 80)])
    return chr(first + rng.randrange(count))


def random_text(rng: random.Random, max_len: int = 200) -> str:
    """A random string: code points, whitespace runs, special tokens inside, now and then a very long word."""
    parts = []
    for _ in range(rng.randrange(max_len)):
        r = rng.random()
        if r < 0.04:
            parts.append("".join(rng.choice(WHITESPACE) for _ in range(rng.randrange(1, 12))))
        elif r < 0.06:
            parts.append(rng.choice(SPECIALS))
        elif r < 0.062:
            unit = "".join(_code_point(rng) for _ in range(rng.randrange(1, 4))).replace(" ", "x")
            parts.append(unit * rng.randrange(100, 5000))  # a word of up to ~20,000 bytes
        else:
            parts.append(_code_point(rng))
    return "".join(parts)


def test_random_unicode(tokenizer_dir):
    rng = random.Random(51)
    texts = [random_text(rng) for _ in range(600)]
    texts += ["", " ", "  ", "\n\n\n", "a" * 30_000, " " * 1000 + "x", "\U0010FFFF\U000E0001\U0001F600", "</s>",
              "x</s>y<s><pad><unk></s", "é" * 3000, "😀" * 2000]
    _assert_same(tokenizer_dir, texts, "random Unicode")


@pytest.mark.parametrize("seed", range(8))
def test_property_random_draws(small_tokenizer_dir, bloom_size_dir, seed):
    """Property: for any drawn text (seeded draws; hypothesis is not a dependency), HF's ids. Short texts in
    one batch through one encoder, so the cache is shared between texts as in a build."""
    rng = random.Random(1000 + seed)
    texts = [random_text(rng, max_len=rng.choice([3, 20, 80])) for _ in range(400)]
    for directory in (small_tokenizer_dir, bloom_size_dir):
        _assert_same(directory, texts, f"draw seed {seed}")


def test_lone_surrogates_refused_as_hf_refuses_them(small_tokenizer_dir):
    """HF's bindings refuse a str holding a lone surrogate (TypeError); so does the encoder. A surrogate pair
    written as JSON escapes is one code point once decoded, and encodes as such."""
    hf = load_tokenizer(small_tokenizer_dir)
    encoder = load_encoder(small_tokenizer_dir)
    for text in ("a\ud800b", "\udfff", "x \udc00 y"):
        with pytest.raises(TypeError):
            hf.encode_batch_fast([text], add_special_tokens=False)
        with pytest.raises(TypeError, match="lone surrogate"):
            encoder.encode_batch(["fine", text])
    with pytest.raises(TypeError, match="not str"):
        encoder.encode_batch([None])  # type: ignore[list-item]
    pair = json.loads('"\\ud83d\\ude00 ok"')
    assert encoder.encode_batch([pair])[0].tolist() == _hf_ids(hf, [pair])[0]


# --- the API and the fallback ---------------------------------------------------------------------------


def test_encode_flat_appends_and_offsets(small_tokenizer_dir, corpus_texts):
    texts = corpus_texts["fr"][:20] + [""]
    for encoder in (load_encoder(small_tokenizer_dir), load_encoder(small_tokenizer_dir, "hf")):
        ids, offsets = encoder.encode_flat(texts, append=2)
        expected = [want + [2] for want in _hf_ids(load_tokenizer(small_tokenizer_dir), texts)]
        assert offsets.tolist() == np.cumsum([0] + [len(w) for w in expected]).tolist()
        assert [ids[offsets[i]:offsets[i + 1]].tolist() for i in range(len(texts))] == expected
        assert encoder.token_to_id("</s>") == 2


def test_token_to_id_is_hfs_for_any_token(small_tokenizer_dir):
    """An eod_token may be any vocabulary entry (megatron-preprocess takes the tokenizer's eos_token): the C++
    encoder answers as HF's token_to_id does, the special tokens without loading HF's tokenizer."""
    hf = load_tokenizer(small_tokenizer_dir)
    encoder = load_encoder(small_tokenizer_dir)
    assert isinstance(encoder, BloomEncoder)
    vocab = hf.get_vocab()
    some = sorted(vocab, key=vocab.__getitem__)[300:310]
    assert [encoder.token_to_id(t) for t in [*some, "</s>", "no such token"]] == \
        [hf.token_to_id(t) for t in [*some, "</s>", "no such token"]]
    assert None not in [encoder.token_to_id(t) for t in some]


def _drop_tokens(config: dict, gone: set[str]) -> None:
    """Remove every token holding one of the ``gone`` characters, and the merges that make them."""
    model = config["model"]
    model["merges"] = [m for m in model["merges"] if not any(g in "".join(m) for g in gone)]
    model["vocab"] = {t: i for t, i in model["vocab"].items() if not any(g in t for g in gone)}


def _rewrite(src: Path, dst: Path, edit) -> Path:
    config = json.loads((src / "tokenizer.json").read_text())
    edit(config)
    dst.mkdir()
    (dst / "tokenizer.json").write_text(json.dumps(config))
    return dst


@pytest.mark.parametrize("change", ["normalizer", "dropout", "prefix_space", "lstrip", "no_bytes_unk"])
def test_other_configurations_use_hf(small_tokenizer_dir, tmp_path, change):
    """A tokenizer the C++ encoder cannot reproduce is encoded by HF's, with one warning naming why."""
    def edit(config):
        if change == "normalizer":
            config["normalizer"] = json.loads(normalizers.NFKC().__getstate__())
        elif change == "dropout":
            config["model"]["dropout"] = 0.1
        elif change == "prefix_space":
            config["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = True
        elif change == "lstrip":
            config["added_tokens"][2]["lstrip"] = True
        else:
            config["model"]["unk_token"] = "<unk>"
            _drop_tokens(config, {"Ā"})  # byte 0's character
    directory = _rewrite(small_tokenizer_dir, tmp_path / change, edit)
    assert unsupported(json.loads((directory / "tokenizer.json").read_text())) is not None
    with pytest.warns(UserWarning, match="encoding with HF tokenizers' encoder") as record:
        encoder = load_encoder(directory)
    assert len(record) == 1 and "\n" not in str(record[0].message)
    assert isinstance(encoder, HFEncoder)
    assert isinstance(load_encoder(small_tokenizer_dir, "hf"), HFEncoder)


def test_module_not_built_falls_back_in_one_line_and_a_bad_kind_names_the_key(small_tokenizer_dir, monkeypatch):
    """Without the C++ module (a wheel built without a compiler) auto is HF's encoder, said in one line, by the
    loader and by the build's driver alike; a kind other than auto or hf names the encoder key."""
    import sys

    import bloomdata
    from bloomdata.errors import BloomstackError
    from bloomdata.tokenizer.encoder import resolve_kind

    monkeypatch.delattr(bloomdata, "_bpe_encoder", raising=False)
    monkeypatch.setitem(sys.modules, "bloomdata._bpe_encoder", None)  # import raises ImportError
    with pytest.warns(UserWarning, match="_bpe_encoder is not built") as record:
        encoder = load_encoder(small_tokenizer_dir)
        kind = resolve_kind(load_tokenizer(small_tokenizer_dir), "auto", "tok")
    assert isinstance(encoder, HFEncoder) and kind == "hf" and len(record) == 2
    assert all("\n" not in str(r.message) for r in record)
    with pytest.raises(BloomstackError, match="encoder 'tiktoken': use auto or hf") as info:
        load_encoder(small_tokenizer_dir, "tiktoken")  # type: ignore[arg-type]
    assert info.value.keys == ("encoder",)


def test_old_merges_format_ignore_merges_and_missing_bytes(small_tokenizer_dir, tmp_path, corpus_texts):
    """BLOOM's own file writes merges as "a b" strings; ignore_merges makes a piece that is a token that token;
    a vocabulary without some bytes (and no unk token) drops them, as HF does."""
    texts = corpus_texts["en"][:40] + corpus_texts["hi"][:20] + ["\x00a\x00", "hello"]

    def strings(config):
        config["model"]["merges"] = [" ".join(m) for m in config["model"]["merges"]]

    def ignore(config):
        config["model"]["ignore_merges"] = True

    def no_bytes(config):
        _drop_tokens(config, {"Ā", "a"})  # bytes 0x00 and 0x61

    for edit in (strings, ignore, no_bytes):
        directory = _rewrite(small_tokenizer_dir, tmp_path / edit.__name__, edit)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no fallback warning: the C++ encoder takes these
            _assert_same(directory, texts, edit.__name__)


def test_same_token_from_two_merges(tmp_path):
    """(a, bc) and (ab, c) both give abc: HF checks an entry's new id, not its rank, so a pair that changed into
    another pair of the same result merges at the first one's rank. Hand-made vocabulary, every order."""
    from tokenizers import models

    from bloomdata.tokenizer.bpe import bloom_tokenizer

    vocab = {c: i for i, c in enumerate("abcd")} | {"ab": 4, "bc": 5, "abc": 6, "cd": 7, "abcd": 8, "bcd": 9}
    merge_list = [("b", "c"), ("a", "bc"), ("a", "b"), ("ab", "c"), ("c", "d"), ("abc", "d"), ("b", "cd"),
                  ("a", "bcd"), ("bc", "d")]
    rng = random.Random(5)
    for trial in range(30):
        order = merge_list[:]
        rng.shuffle(order)
        tok = bloom_tokenizer()
        tok.model = models.BPE(vocab=vocab, merges=order)
        directory = tmp_path / f"t{trial}"
        save_tokenizer(tok, directory)
        texts = ["".join(rng.choice("abcd") for _ in range(rng.randrange(1, 12))) for _ in range(200)]
        _assert_same(directory, texts, f"merge order {order}")


# --- the build ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("split_by", ["lang", "none"])
def test_build_bytes_same_with_either_encoder(tmp_path, small_tokenizer_dir, small_corpus, split_by):
    """`bloomdata build` (default encoder) and `--encoder hf` write the same .bin/.idx, eod appended."""
    from bloomdata.build import run_build
    from tests.bloomdata.build_helpers import _config, _outputs

    outputs = {}
    for encoder in ("auto", "hf"):
        out = tmp_path / encoder
        run_build(_config([small_corpus], small_tokenizer_dir, out, workers=0, append_eod=True, split_by=split_by,
                          encoder=encoder, batch_docs=37))
        outputs[encoder] = _outputs(out)
    assert outputs["auto"] == outputs["hf"] and len(outputs["auto"]) == (8 if split_by == "lang" else 2)


def test_build_says_once_why_it_uses_hfs_encoder(tmp_path, small_tokenizer_dir, small_corpus):
    """A tokenizer the C++ encoder cannot reproduce: the build's driver warns once, in one line, and hands its
    shards HF's encoder (they do not warn again); the ids are that tokenizer's."""
    from bloomdata.build import run_build
    from tests.bloomdata.build_helpers import _config, _outputs

    def edit(config):
        config["normalizer"] = json.loads(normalizers.NFKC().__getstate__())
    directory = _rewrite(small_tokenizer_dir, tmp_path / "nfkc", edit)
    with pytest.warns(UserWarning, match="normalizer NFKC") as record:
        run_build(_config([small_corpus], directory, tmp_path / "auto", workers=0, append_eod=True, split_by="none"))
    assert len([r for r in record if "HF tokenizers' encoder" in str(r.message)]) == 1
    assert "\n" not in str(record[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run_build(_config([small_corpus], directory, tmp_path / "hf", workers=0, append_eod=True, split_by="none",
                          encoder="hf"))
    assert _outputs(tmp_path / "auto") == _outputs(tmp_path / "hf")
