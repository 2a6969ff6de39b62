"""`bloomdata train-tokenizer --trainer counts` against HF's in-memory BpeTrainer (`--trainer memory`) on one sample.

    python benchmarks/bench_tokenizer.py                                  # 100 and 500 MB, vocab 32,000, 2 workers
    python benchmarks/bench_tokenizer.py --sizes 120 360                  # the issue's memory check
    python benchmarks/bench_tokenizer.py --sizes 120 360 --counts-only --max-memory 512MB   # the same, bounded
    python benchmarks/bench_tokenizer.py --sizes 5000 --counts-only --max-memory 2GB   # the 5 GB figures
    python benchmarks/bench_tokenizer.py --sizes 120 360 --words-per-script 50000      # distinct words fixed

Input (issue 32's): text drawn from a Zipfian vocabulary of 2M words (rank r drawn with p ~ 1/r; four scripts,
500,000 words each: Latin, Cyrillic, Devanagari and Han syllables of 1-4 units), ~4 KB documents of one script
each, one jsonl file per size, written once under --work. The whole file is the sample (``--byte-budget`` = its
size: every document is drawn), so both trainers see the same text.

Each run is the CLI in a fresh process: the memory trainer (``--trainer memory --allow-large-budget``) and the
counts trainer (``--trainer counts --workers W``, ``--max-memory`` when given). Printed per run: wall time,
the split between sampling/counting and learning (training_report.json), the peak RSS of the process tree and
of each process (the CLI, and for the counts trainer each Dask worker), and whether tokenizer.json is byte for
byte the memory trainer's. Goal (issue 32): identical output; the counts trainer's peak memory follows the
distinct words (flat from 120 MB to 360 MB), not the bytes of text as the memory trainer's does.

Over 2M words, 120 MB of this text holds ~1.15M distinct words and 360 MB ~1.74M: the distinct words grow with
the text there. ``--words-per-script 50000`` (200,000 words) draws a vocabulary that 120 MB already nearly
exhausts, so both sizes hold about the same distinct words and only the bytes of text differ: the case that
tells "follows the distinct words" from "follows the text".
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import psutil
from bench_scale import run  # this script's folder is sys.path[0]

SCRIPTS = {"en": (0x61, 26), "ru": (0x430, 32), "hi": (0x915, 37), "zh": (0x4E00, 2000)}  # first code point, units
WORD_UNITS = {"en": (2, 9), "ru": (2, 9), "hi": (2, 9), "zh": (1, 4)}  # shortest and longest word, in units
WORDS_PER_SCRIPT = 500_000
DOC_WORDS = 700  # ~4 KB of Latin text per document


def zipf_vocabulary(rng: np.random.Generator, per_script: int = WORDS_PER_SCRIPT) -> dict[str, list[str]]:
    """``per_script`` distinct words per script: 2-9 random letters (1-4 Han characters), drawn until new."""
    vocab: dict[str, list[str]] = {}
    for lang, (first, units) in SCRIPTS.items():
        seen: set[str] = set()
        shortest, longest = WORD_UNITS[lang]
        while len(seen) < per_script:
            for n in rng.integers(shortest, longest + 1, size=per_script):
                seen.add("".join(chr(first + int(c)) for c in rng.integers(0, units, size=n)))
                if len(seen) == per_script:
                    break
        vocab[lang] = sorted(seen)
        rng.shuffle(vocab[lang])  # rank order: random with respect to spelling
    return vocab


def make_input(path: Path, mb: int, seed: int = 0, per_script: int = WORDS_PER_SCRIPT) -> Path:
    """~``mb`` MB of Zipfian documents over ``per_script`` words per script (written once; reused when present)."""
    if path.is_file():
        return path
    rng = np.random.default_rng(seed)
    vocab = zipf_vocabulary(rng, per_script)
    ranks = np.arange(1, per_script + 1, dtype=np.float64)
    cdf = np.cumsum(1 / ranks)
    cdf /= cdf[-1]
    langs, size, tmp = sorted(vocab), 0, path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        while size < mb * 1_000_000:
            lang = langs[int(rng.integers(len(langs)))]
            words = vocab[lang]
            picks = np.searchsorted(cdf, rng.random(DOC_WORDS))
            text = " ".join(words[i] for i in picks.tolist())
            line = json.dumps({"text": text, "lang": lang}, ensure_ascii=False) + "\n"
            out.write(line)
            size += len(line.encode("utf-8"))
    tmp.rename(path)
    return path


def train(src: Path, out: Path, trainer: str, args: argparse.Namespace) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-m", "bloomdata.cli", "train-tokenizer", "--input", str(src), "--out", str(out),
           "--trainer", trainer, "--byte-budget", str(src.stat().st_size), "--vocab-size", str(args.vocab_size),
           "--quiet"]
    if trainer == "memory":
        cmd += ["--allow-large-budget"]
    else:
        cmd += ["--workers", str(args.workers)] + (["--max-memory", args.max_memory] if args.max_memory else [])
    result = run(cmd)
    report = json.loads((out / "training_report.json").read_text())
    return {**result, "sampling_s": report["sampling_seconds"], "training_s": report["training_seconds"],
            "words": report.get("distinct_words"), "mb": report["total_bytes_drawn"] / 1e6}


def show(trainer: str, r: dict) -> str:
    procs = ", ".join(f"{mb:.0f}" for mb in r["procs_mb"])
    words = f"  {r['words']:,} distinct words" if r["words"] else ""
    return (f"{trainer:<7} {r['mb']:7.1f} MB  wall {r['wall_s']:7.1f} s (sample/count {r['sampling_s']:6.1f} s, "
            f"learn {r['training_s']:6.1f} s)  peak tree {r['tree_mb']:6.0f} MB  per process [{procs}] MB{words}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[100, 500], help="sample sizes in MB")
    ap.add_argument("--vocab-size", type=int, default=32_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--max-memory", default=None, help="the counts trainer's --max-memory (e.g. 2GB)")
    ap.add_argument("--counts-only", action="store_true", help="no memory trainer (samples it cannot hold)")
    ap.add_argument("--words-per-script", type=int, default=WORDS_PER_SCRIPT,
                    help="distinct words of the Zipfian vocabulary per script (four scripts)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bloomstack_bench_tokenizer"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d')}, {args.workers} workers, {psutil.cpu_count()} CPUs, vocab {args.vocab_size:,}"
          f", max-memory {args.max_memory}, load average {psutil.getloadavg()[0]:.1f}", flush=True)
    for mb in args.sizes:
        words = "" if args.words_per_script == WORDS_PER_SCRIPT else f"_{args.words_per_script}w"
        src = make_input(args.work / f"zipf_{mb}mb{words}.jsonl", mb, per_script=args.words_per_script)
        counts = train(src, args.work / "counts", "counts", args)
        print(show("counts", counts), flush=True)
        if args.counts_only:
            continue
        memory = train(src, args.work / "memory", "memory", args)
        print(show("memory", memory), flush=True)
        same = (args.work / "counts" / "tokenizer.json").read_bytes() == \
            (args.work / "memory" / "tokenizer.json").read_bytes()
        print(f"{mb} MB: tokenizer.json identical: {same}; "
              f"counts/memory wall {counts['wall_s'] / memory['wall_s']:.2f}, "
              f"peak tree {counts['tree_mb'] / memory['tree_mb']:.2f}, largest process "
              f"{max(counts['procs_mb']) / max(memory['procs_mb']):.2f}", flush=True)
        if not same:
            raise SystemExit("the counts trainer's tokenizer.json differs from the memory trainer's")


if __name__ == "__main__":
    main()
