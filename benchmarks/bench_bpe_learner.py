"""The C++ merge learner (csrc/bpe) alone at BLOOM's vocabulary over millions to tens of millions of distinct words.

    python benchmarks/bench_bpe_learner.py                         # 2M, 10M and 30M distinct words, vocab 250,680
    python benchmarks/bench_bpe_learner.py --words 1000000 --vocab-size 32000

Issue 32 asks that 250,680 merges over tens of millions of unique words finish in hours, not days. The counts
trainer's samples hold 1-2M distinct words (benchmarks/RESULTS.md); this script gives the learner many more,
without counting a corpus first: the words are drawn as bench_tokenizer.py's vocabulary is (four scripts:
Latin, Cyrillic and Devanagari words of 2-9 letters, Han words of 1-4 characters), distinct by construction
(random distinct numbers written in each script's letters), and each gets a Zipfian count (rank r, ~C / r, at
least 1; ~35 occurrences per distinct word, as the 360 MB sample of bench_tokenizer has).

Each size runs in a fresh process (``--one N``) so that its peak RSS (getrusage) is its own. Printed per size:
distinct words, symbols (UTF-8 bytes), the seconds to make the words, the learner's seconds, merges, vocabulary
reached, the process's RSS before learning and its peak, and ``learner_bytes``' estimate (what ``--max-memory``
is checked against) beside the peak minus the RSS of the loaded interpreter.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np
import psutil
from bench_tokenizer import SCRIPTS, WORD_UNITS  # this script's folder is sys.path[0]

OCCURRENCES_PER_WORD = 35


def utf8_columns(points: np.ndarray, width: int) -> np.ndarray:
    """uint8[n, L * width]: the UTF-8 bytes of code points ``points`` (int64[n, L]), all of one byte width."""
    if width == 1:
        parts = [points]
    elif width == 2:
        parts = [0xC0 | points >> 6, 0x80 | points & 0x3F]
    else:
        parts = [0xE0 | points >> 12, 0x80 | (points >> 6) & 0x3F, 0x80 | points & 0x3F]
    return np.stack(parts, axis=2).reshape(len(points), -1).astype(np.uint8)


def distinct_numbers(rng: np.random.Generator, space: int, n: int) -> np.ndarray:
    """``n`` distinct random integers in [0, space), in random order."""
    if n >= space:
        return rng.permutation(space)
    picked = np.zeros(0, dtype=np.int64)
    while len(picked) < n:
        picked = np.unique(np.concatenate([picked, rng.integers(0, space, size=int((n - len(picked)) * 1.05) + 16)]))
    return rng.permutation(picked)[:n]


def make_words(n: int, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
    """About ``n`` distinct words, as (UTF-8 byte matrices, one per script and length; int64 lengths in bytes of
    every word in the same order). A script's words spread evenly over its lengths, capped by each length's space."""
    rng = np.random.default_rng(seed)
    blocks: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    per_script = n // len(SCRIPTS)
    for lang, (first, letters) in SCRIPTS.items():
        shortest, longest = WORD_UNITS[lang]
        width = len(chr(first).encode("utf-8"))  # every letter of a script's range has its first one's width
        left = per_script
        for length in range(shortest, longest + 1):
            share = min(left // (longest - length + 1), letters ** length)
            numbers = distinct_numbers(rng, letters ** length, share)
            digits = np.stack([(numbers // letters ** i) % letters for i in range(length)], axis=1)
            blocks.append(utf8_columns(first + digits, width))
            lengths.append(np.full(share, length * width, dtype=np.int64))
            left -= share
    return blocks, np.concatenate(lengths)


def one(n: int, vocab_size: int) -> dict:
    from bloomdata.tokenizer.merges import (
        WordArrays,
        byte_ids,
        byte_level_chars,
        initial_vocab,
        learn_merges,
        learner_bytes,
    )

    interpreter = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    blocks, lengths = make_words(n)
    vocab = initial_vocab(["<unk>", "<s>", "</s>", "<pad>"], byte_level_chars())
    ids = byte_ids(vocab)
    symbols = np.concatenate([ids[b.reshape(-1)] for b in blocks])
    del blocks
    words = len(lengths)
    offsets = np.zeros(words + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    del lengths
    ranks = np.random.default_rng(1).permutation(words) + 1
    scale = OCCURRENCES_PER_WORD * words / np.log(words)
    counts = np.maximum(1, np.floor(scale / ranks)).astype(np.uint64)
    del ranks
    made_s = time.perf_counter() - t0
    before = psutil.Process().memory_info().rss
    t0 = time.perf_counter()
    learned = learn_merges(WordArrays(symbols, offsets, counts), vocab, vocab_size, 0)
    learn_s = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"words": words, "symbols": int(offsets[-1]), "occurrences": int(counts.sum()), "made_s": round(made_s, 1),
            "learn_s": round(learn_s, 1), "merges": len(learned.merges), "vocab": len(learned.vocab),
            "rss_before_mb": before / 1e6, "peak_mb": peak / 1e6, "interpreter_mb": interpreter / 1e6,
            "estimate_mb": learner_bytes(words, int(offsets[-1])) / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, nargs="+", default=[2_000_000, 10_000_000, 30_000_000])
    ap.add_argument("--vocab-size", type=int, default=250_680)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)  # one size, in this process
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.vocab_size)))
        return
    print(f"{time.strftime('%Y-%m-%d %H:%M')}, {psutil.cpu_count()} CPUs, vocab {args.vocab_size:,}, "
          f"load average {psutil.getloadavg()[0]:.1f}", flush=True)
    for n in args.words:
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--vocab-size", str(args.vocab_size)],
                             check=True, capture_output=True, text=True).stdout
        r = json.loads(out.splitlines()[-1])
        print(f"{r['words']:>11,} words ({r['symbols'] / 1e6:6.1f} M symbols, {r['occurrences'] / 1e6:7.1f} M "
              f"occurrences): made in {r['made_s']:6.1f} s; learned {r['merges']:,} merges (vocab {r['vocab']:,}) in "
              f"{r['learn_s']:7.1f} s; RSS before {r['rss_before_mb']:6.0f} MB, peak {r['peak_mb']:6.0f} MB "
              f"({r['peak_mb'] - r['interpreter_mb']:6.0f} above the interpreter, estimated {r['estimate_mb']:6.0f})",
              flush=True)


if __name__ == "__main__":
    main()
