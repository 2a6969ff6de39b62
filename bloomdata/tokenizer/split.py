"""BLOOM's split pattern, and the same split in Python's ``re`` for the counts trainer's workers.

``BLOOM_SPLIT_PATTERN`` is Oniguruma syntax, what tokenizer.json holds: ``[^(\\s|[.,!?…。，、।۔،])]`` is ONE
negated class, so text breaks at exactly 39 code points: Oniguruma's 25 Unicode whitespace characters and
14 punctuation marks (docs/tokenizer.md). A piece is an optional space and a run of other characters; with
``Isolated`` behaviour, every run of excluded characters between two pieces is a piece of its own.

``split_pieces`` gives the same pieces with Python's ``re``, the class written out (Python's ``\\s`` is
another set: it holds U+001C-U+001F, Oniguruma's does not). A gap stops before a space that starts a piece,
as the gap between two Oniguruma matches does (the leftmost match takes that space). It builds ~5x fewer
Python objects than ``pre_tokenize_str`` (no offsets). The counting workers split in C++ (csrc/bpe/split.h, at
``excluded_code_points``) when it is built, without a Python object per piece; tests/bloomdata/test_tokenizer_counts.py
checks both against HF's pre-tokenizer on every BMP code point and on the whole test corpus.
"""

from __future__ import annotations

import functools
import re

BLOOM_SPLIT_PATTERN = " ?[^(\\s|[.,!?…。，、।۔،])]+"
# The 39 excluded code points: Oniguruma's \s (25) and the class's punctuation (14), for a Python class.
EXCLUDED = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
            "!(),.?|\u2026\u3001\u3002\uff0c\u0964\u06d4\u060c")
PIECES = re.compile(f" ?[^{EXCLUDED}]+|(?:(?! [^{EXCLUDED}])[{EXCLUDED}])+")


@functools.cache
def excluded_code_points() -> tuple[int, ...]:
    """The code points of ``EXCLUDED`` (its range expanded), for the C++ split of the counting workers
    (csrc/bpe/split.h): every BMP code point the class matches (none above it is excluded)."""
    excluded = re.compile(f"[{EXCLUDED}]")
    return tuple(c for c in range(0x10000) if excluded.match(chr(c)))


def split_pieces(text: str) -> list[str]:
    """BLOOM's pre-tokenization pieces of ``text`` (before ByteLevel), as HF's ``Split`` yields them."""
    return PIECES.findall(text)
