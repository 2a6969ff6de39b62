"""A BLOOM-size (250,680-token) byte-level BPE tokenizer built in about a second, for tests/bloomdata/test_encoder.py.

No such tokenizer can be downloaded in a test, and training one needs far more text than the test corpus holds.
This one is built from the corpus's own words: each distinct piece of BLOOM's split (as byte-level characters)
is cut at random points into a binary tree, and every inner node is a merge (left, right) -> left + right,
until the vocabulary holds 250,680 tokens (4 special tokens, the 256 bytes, the merged tokens). The merges are
ranked roughly shortest first, with noise, so that ranks interleave across words. Different words cut the same
string differently, so many tokens are the result of several merges ((a, bc) and (ab, c)): the case where HF's
merge loop checks the new id, not the rank, of an entry. Every merge fires on the corpus it was drawn from.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from tokenizers import Tokenizer, models

from bloomdata.tokenizer.bpe import SPECIAL_TOKENS, bloom_tokenizer
from bloomdata.tokenizer.encoder import byte_alphabet
from bloomdata.tokenizer.split import split_pieces

BLOOM_SIZE = 250_680
MAX_PIECE = 48  # characters of a piece cut into a tree (longer pieces: their first 48)


def _pieces(texts: Iterable[str], rng: random.Random) -> list[str]:
    """The distinct pieces of the texts' split, as byte-level strings, in a seeded random order."""
    alphabet = byte_alphabet()
    seen = {"".join(alphabet[b] for b in piece.encode("utf-8")[:MAX_PIECE])
            for text in texts for piece in split_pieces(text)}
    pieces = sorted(p for p in seen if len(p) > 1)
    rng.shuffle(pieces)
    return pieces


def bloom_size_tokenizer(texts: list[str], size: int = BLOOM_SIZE, seed: int = 0) -> Tokenizer:
    """BLOOM's pipeline over a ``size``-token vocabulary of random merge trees of the texts' pieces."""
    rng = random.Random(seed)
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    for c in byte_alphabet():
        vocab[c] = len(vocab)
    merges: dict[tuple[str, str], float] = {}

    def cut(s: str) -> None:
        if len(s) == 1 or len(vocab) >= size:
            return
        k = rng.randrange(1, len(s))
        left, right = s[:k], s[k:]
        cut(left)
        cut(right)
        if left in vocab and right in vocab and (len(vocab) < size or s in vocab):
            merges.setdefault((left, right), len(s) + rng.random() * 6)
            vocab.setdefault(s, len(vocab))

    pieces = _pieces(texts, rng)
    for _ in range(8):  # each round cuts every piece anew: more merges, more tokens reached twice
        rng.shuffle(pieces)
        for piece in pieces:
            cut(piece)
            if len(vocab) >= size:
                break
        if len(vocab) >= size:
            break
    ordered = sorted(merges, key=merges.__getitem__)
    tok = bloom_tokenizer()
    tok.model = models.BPE(vocab=vocab, merges=ordered, unk_token=None, fuse_unk=False)
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    return tok
