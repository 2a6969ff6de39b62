"""``load_encoder(path, kind)``: token ids of texts, exactly Hugging Face tokenizers', at several times its speed.

Every place bloomdata and bloomtrain turn text into ids (``bloomdata build``, ``fertility``, evaluation) calls
``encode_batch(texts)`` (one uint32 array per text) or ``encode_flat(texts, append)`` (one array for the batch
and offsets) on what ``load_encoder`` returns. Ids are always without special tokens added (Megatron appends
``</s>`` as end of document itself); special and added tokens written inside the text are matched as HF does.

- ``kind="auto"`` (the default): the C++ encoder (``bloomdata._bpe_encoder``, csrc/bpe/encoder.h) when the
  tokenizer.json is BLOOM's configuration (``unsupported`` says what is checked), HF's otherwise, with one
  warning line naming why. The C++ encoder splits with BLOOM's pattern (csrc/bpe/split.h), merges each
  piece's bytes as HF's BPE does (lowest rank first, leftmost on ties) and keeps a per-process cache of the
  words it has merged (``CACHE_WORDS``); docs/tokenizer.md, "The encoder", has the measurements.
- ``kind="hf"``: HF tokenizers' ``encode_batch_fast``, whatever the tokenizer.

A str holding a lone surrogate raises TypeError in both (HF's bindings refuse it; the readers reject such rows
before: bloomdata/readers/records.py). tests/bloomdata/test_encoder.py checks the ids against HF's.
"""

from __future__ import annotations

import functools
import json
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import numpy as np

from bloomdata.errors import BloomstackError
from bloomdata.tokenizer.split import BLOOM_SPLIT_PATTERN, excluded_code_points

EncoderKind = Literal["auto", "hf"]
ENCODER_HELP = ("token encoder: auto (bloomdata's C++ encoder for BLOOM-configured byte-level BPE, HF's "
                "otherwise; same ids) or hf (HF tokenizers' encoder)")
CACHE_WORDS = 1 << 18  # distinct words the C++ encoder's cache holds (~20 MB at most, emptied when full)


class TextEncoder(Protocol):
    """What ``load_encoder`` returns."""

    name: str  # "bloomdata" or "hf"

    def encode_flat(self, texts: Sequence[str], append: int | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]: ...

    def token_to_id(self, token: str) -> int | None: ...


class _Batches:
    """``encode_batch`` from ``encode_flat``."""

    def encode_flat(self, texts: Sequence[str], append: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """One uint32 array of ids per text (views of one array)."""
        ids, offsets = self.encode_flat(texts)
        return np.split(ids, offsets[1:-1]) if len(texts) else []


class BloomEncoder(_Batches):
    """The C++ encoder over a BLOOM-configured tokenizer.json (``unsupported(config)`` is None)."""

    name = "bloomdata"

    def __init__(self, config: dict[str, Any], cache_words: int = CACHE_WORDS,
                 hf: Callable[[], Any] | None = None) -> None:
        from bloomdata import _bpe_encoder  # noqa: PLC0415 - optional extension: load_encoder checks it

        model = config["model"]
        vocab: dict[str, int] = model["vocab"]
        to_byte = {c: b for b, c in enumerate(byte_alphabet())}
        # merges are pairs (tokenizers >= 0.20) or "a b" strings (older files, BLOOM's own)
        pairs = (m.split(" ", 1) if isinstance(m, str) else m for m in model["merges"])
        merges = np.array([(vocab[a], vocab[b], vocab[a + b]) for a, b in pairs], dtype=np.uint32).reshape(-1, 3)
        added = [(a["content"].encode("utf-8"), a["id"], bool(a.get("normalized", False)))
                 for a in config.get("added_tokens") or []]
        whole = [(bytes(to_byte[c] for c in t), i) for t, i in vocab.items() if set(t) <= to_byte.keys()] \
            if model.get("ignore_merges") else []
        self._encoder = _bpe_encoder.Encoder(byte_ids(vocab), merges, list(excluded_code_points()), added,
                                             bool(model.get("ignore_merges")), whole, cache_words)
        # the ids callers ask for by name (end of document, padding): the added tokens over the vocabulary's
        self._named: dict[str, int] = {t: vocab[t] for t in ("<unk>", "<s>", "</s>", "<pad>") if t in vocab}
        self._named.update({a["content"]: a["id"] for a in config.get("added_tokens") or []})
        self._hf = hf  # loads HF's Tokenizer of the same file, for token_to_id of any other vocabulary entry

    def encode_flat(self, texts: Sequence[str], append: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(ids uint32[N], offsets int64[len(texts) + 1]): text i's ids are ``ids[offsets[i]:offsets[i + 1]]``,
        ending with ``append`` when given."""
        return self._encoder.encode_batch(texts, -1 if append is None else append)

    def token_to_id(self, token: str) -> int | None:
        """HF's ``token_to_id``: an added token's or BLOOM's special tokens' id at once; any other token's
        through HF's Tokenizer (``hf``, loaded for the question, then dropped; None without ``hf``)."""
        if token not in self._named and self._hf is not None:
            self._named[token] = self._hf().token_to_id(token)
        return self._named.get(token)

    @property
    def cached_words(self) -> int:
        return self._encoder.cached_words


class HFEncoder(_Batches):
    """HF tokenizers' ``encode_batch_fast`` (no offsets), without special tokens added."""

    name = "hf"

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    def encode_flat(self, texts: Sequence[str], append: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        encodings = self.tokenizer.encode_batch_fast(list(texts), add_special_tokens=False)
        lists = [e.ids + [append] if append is not None else e.ids for e in encodings]
        offsets = np.zeros(len(lists) + 1, dtype=np.int64)
        np.cumsum([len(ids) for ids in lists], out=offsets[1:])
        ids = np.fromiter((i for ids in lists for i in ids), dtype=np.uint32, count=int(offsets[-1]))
        return ids, offsets

    def token_to_id(self, token: str) -> int | None:
        return self.tokenizer.token_to_id(token)


@functools.cache
def byte_alphabet() -> tuple[str, ...]:
    """The character of each byte 0..255 in byte-level BPE tokens (GPT-2's ``bytes_to_unicode``, HF's ByteLevel):
    printable bytes stand for themselves, the others for 256 + their rank among them."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return tuple(chars[b] for b in range(256))


def byte_ids(vocab: dict[str, int]) -> list[int]:
    """The token id of each byte's character in ``vocab``, -1 where the vocabulary lacks it."""
    return [vocab.get(c, -1) for c in byte_alphabet()]


def _pre_tokenizer_ok(pre: Any) -> bool:
    if not isinstance(pre, dict) or pre.get("type") != "Sequence" or len(pre.get("pretokenizers") or []) != 2:
        return False
    split, byte_level = pre["pretokenizers"]
    return (split.get("type") == "Split" and split.get("pattern") == {"Regex": BLOOM_SPLIT_PATTERN}
            and split.get("behavior") == "Isolated" and not split.get("invert")
            and byte_level.get("type") == "ByteLevel" and not byte_level.get("add_prefix_space")
            and byte_level.get("use_regex") is False)


def unsupported(config: dict[str, Any]) -> str | None:
    """Why the C++ encoder cannot give HF's ids for this tokenizer.json, or None when it can: BLOOM's
    configuration (no normalizer, BLOOM's Split then ByteLevel without regex or prefix space, BPE without
    dropout, subword prefix or suffix, no truncation or padding, added tokens matched verbatim). The merges
    are checked while ``BloomEncoder`` reads them."""
    model = config.get("model") or {}
    if model.get("type") != "BPE":
        return f"model {model.get('type')} is not BPE"
    if config.get("normalizer") is not None:
        return f"normalizer {config['normalizer'].get('type')} (BLOOM has none)"
    if not _pre_tokenizer_ok(config.get("pre_tokenizer")):
        return "the pre-tokenizer is not BLOOM's (Split on its pattern, then ByteLevel without regex)"
    if model.get("dropout") not in (None, 0, 0.0):
        return f"BPE dropout {model['dropout']}"
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return "a continuing-subword prefix or end-of-word suffix"
    if config.get("truncation") is not None or config.get("padding") is not None:
        return "truncation or padding is set"
    for a in config.get("added_tokens") or []:
        if a.get("single_word") or a.get("lstrip") or a.get("rstrip"):
            return f"added token {a['content']!r} has single_word, lstrip or rstrip"
    vocab = model.get("vocab") or {}
    if min(byte_ids(vocab)) < 0 and (model.get("unk_token") is not None or model.get("byte_fallback")):
        return "bytes missing from the vocabulary with an unk token or byte fallback"
    return None  # merges of tokens outside the vocabulary: BloomEncoder raises KeyError (HF refuses the file)


def load_encoder(tokenizer_path: str | os.PathLike[str], kind: EncoderKind = "auto") -> TextEncoder:
    """The encoder of a tokenizer.json (or a directory holding one): bloomdata's where it gives HF's ids
    (``kind="auto"``), else HF's, with one warning saying why; ``kind="hf"``: HF's."""
    from bloomdata.tokenizer.bpe import _tokenizer_file, load_tokenizer  # noqa: PLC0415 - bpe imports tokenizers

    _check_kind(kind)
    if kind == "hf":
        return HFEncoder(load_tokenizer(tokenizer_path))
    file = _tokenizer_file(tokenizer_path)
    try:
        config = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return HFEncoder(load_tokenizer(file))  # raises its error naming the file
    return _bloom_or_hf(config, str(file), lambda: load_tokenizer(file))


def encoder_of(tokenizer: Any, kind: EncoderKind = "auto", name: str = "tokenizer") -> TextEncoder:
    """The encoder of a loaded ``tokenizers.Tokenizer`` (a transformers fast tokenizer's ``backend_tokenizer``),
    as ``load_encoder`` chooses it; ``name`` is what the fallback warning calls it."""
    _check_kind(kind)
    if kind == "hf":
        return HFEncoder(tokenizer)
    return _bloom_or_hf(json.loads(tokenizer.to_str()), name, lambda: tokenizer)


def _check_kind(kind: str) -> None:
    if kind not in ("auto", "hf"):
        raise BloomstackError(f"encoder {kind!r}: use auto or hf", keys=["encoder"])


def resolve_kind(tokenizer: Any, kind: EncoderKind, name: str) -> EncoderKind:
    """The kind a driver hands its worker processes for a loaded ``tokenizers.Tokenizer``: "hf" when asked, or
    when the C++ encoder cannot give HF's ids (then the one warning ``load_encoder`` gives, here once rather
    than in every worker), else "auto"."""
    _check_kind(kind)
    if kind == "hf":
        return "hf"
    reason = _fallback_reason(json.loads(tokenizer.to_str()))
    if reason is None:
        return "auto"
    _warn_fallback(name, reason)
    return "hf"


def _fallback_reason(config: Any) -> str | None:
    """Why the C++ encoder cannot take this tokenizer.json (``unsupported``, or the module not built), or None."""
    reason = unsupported(config) if isinstance(config, dict) else "not a JSON object"
    if reason is None:
        try:
            from bloomdata import _bpe_encoder  # noqa: F401, PLC0415 - optional extension
        except ImportError:
            reason = "bloomdata._bpe_encoder is not built (reinstall with a C++ compiler)"
    return reason


def _warn_fallback(name: str, reason: str) -> None:
    warnings.warn(f"{name}: {reason}; encoding with HF tokenizers' encoder (same ids, slower)", stacklevel=4)


def _bloom_or_hf(config: Any, name: str, hf: Callable[[], Any]) -> TextEncoder:
    reason = _fallback_reason(config)
    if reason is None:
        try:
            return BloomEncoder(config, hf=hf)
        except KeyError as exc:
            reason = f"a merge's token {exc} is not in the vocabulary"
    del config
    _warn_fallback(name, reason)
    return HFEncoder(hf())
