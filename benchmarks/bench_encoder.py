"""bloomdata's encoder (``load_encoder``, csrc/bpe/encoder.h) against HF tokenizers' ``encode_batch_fast``, same texts.

    python benchmarks/bench_encoder.py                      # scripts, Zipf text, the 60 MB jsonl, workers, memory
    python benchmarks/bench_encoder.py --quick              # 1 MB per script, a 10 MB jsonl, no memory runs
    python benchmarks/bench_encoder.py --tokenizer DIR      # any tokenizer.json (a BLOOM one: 250,680 tokens)
    python benchmarks/bench_encoder.py --vocab bloom-size   # the tests' 250,680-token vocabulary of the corpus

Tokenizer: --tokenizer, else BLOOM's configuration trained on tests/data/corpus (--vocab-size, 32,000 as
bench_build.py), or with ``--vocab bloom-size`` tests/bloomdata/encoder_vocab.py's 250,680 tokens.
Texts, each side given the same list of str in batches of the build's ``batch_docs`` (1,000 documents):

1. per script, the test corpus's documents of that script repeated and shuffled to --script-mb MB: Latin
   (en fr es pt ca eu id vi sw yo), CJK (zh), Arabic (ar ur), Devanagari (hi mr); Thai, which the corpus lacks,
   is drawn (Thai letters in words of 2-8, a space after 1-4 words: the script without spaces between words);
2. ``zipf``: --zipf-mb MB of bench_tokenizer.py's Zipfian text over 2M distinct words (4 scripts), where words
   repeat as in natural text rather than as in a repeated corpus (the cache's hard case);
3. the 60 MB jsonl of bench_build.py (the corpus repeated and shuffled), its texts parsed into memory first.

Single-threaded: ``TOKENIZERS_PARALLELISM=false`` (set here before tokenizers loads), one process, a fresh
encoder or tokenizer per round (its cache empty), the best of --repeat interleaved rounds; the first round checks
the ids are identical. With the build's workers: --workers spawned processes, each encoding 1/N of the 60 MB
file's texts after a barrier (wall = first start to last end), as bench_build.py's ceiling. Memory per worker:
``bloomdata build --workers N --append-eod`` of the 60 MB file with ``--encoder hf`` and with the default, each
in a fresh process tree, the peak RSS of each Dask worker (psutil, every 0.1 s: bench_scale.run).
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # before tokenizers loads: HF's encode_batch on one thread
os.environ["RAYON_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
CORPUS = REPO / "tests" / "data" / "corpus"
SCRIPTS = {"Latin": ["en", "fr", "es", "pt", "ca", "eu", "id", "vi", "sw", "yo"], "CJK": ["zh"],
           "Arabic": ["ar", "ur"], "Devanagari": ["hi", "mr"], "Thai": []}
BATCH = 1000  # BuildConfig.batch_docs


def thai_documents(rng: random.Random, n: int) -> list[str]:
    """Drawn Thai text: letters U+0E01-U+0E2E with vowel signs, words of 2-8 letters, a space every 1-4 words."""
    letters = [chr(c) for c in range(0x0E01, 0x0E2F)] + [chr(c) for c in range(0x0E30, 0x0E3A)]
    docs = []
    for _ in range(n):
        words = ["".join(rng.choices(letters, k=rng.randint(2, 8))) for _ in range(rng.randint(80, 250))]
        docs.append("".join(w + (" " if rng.random() < 0.4 else "") for w in words))
    return docs


def script_texts(script: str, mb: float, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    langs = SCRIPTS[script]
    docs = [json.loads(line)["text"] for lang in langs for line in (CORPUS / f"{lang}.jsonl").read_text().splitlines()]
    docs = docs or thai_documents(rng, 300)
    texts: list[str] = []
    while sum(len(t.encode()) for t in texts) < mb * 1e6:
        batch = docs[:]
        rng.shuffle(batch)
        texts += batch
    return texts


def encode_all(encoder, texts: list[str]) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, ids) of encoding ``texts`` in batches of ``BATCH``. HF's side is its bare
    ``encode_batch_fast`` and ``.ids`` of each encoding (what bench_build.py's ceiling times), not our HFEncoder's array
    packing."""
    start, cpu, total = time.perf_counter(), time.process_time(), 0
    hf = getattr(encoder, "tokenizer", None)
    for lo in range(0, len(texts), BATCH):
        if hf is not None:
            total += sum(len(e.ids) for e in hf.encode_batch_fast(texts[lo:lo + BATCH], add_special_tokens=False))
        else:
            total += int(encoder.encode_flat(texts[lo:lo + BATCH])[1][-1])
    return time.perf_counter() - start, time.process_time() - cpu, total


def same_ids(tokenizer: str, texts: list[str]) -> bool:
    from bloomdata.tokenizer.encoder import load_encoder

    ours, hf = load_encoder(tokenizer), load_encoder(tokenizer, "hf")
    for lo in range(0, len(texts), BATCH):
        a, b = ours.encode_flat(texts[lo:lo + BATCH]), hf.encode_flat(texts[lo:lo + BATCH])
        if not (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])):
            return False
    return True


def single_thread(tokenizer: str, texts: list[str], repeat: int) -> dict:
    """Best wall and CPU seconds of each side over ``repeat`` interleaved rounds, each with a fresh encoder."""
    from bloomdata.tokenizer.encoder import load_encoder

    wall: dict[str, float] = {}
    cpu: dict[str, float] = {}
    tokens = 0
    for _ in range(repeat):
        for kind in ("hf", "auto"):
            encoder = load_encoder(tokenizer, kind)  # type: ignore[arg-type]
            seconds, cpu_s, tokens = encode_all(encoder, texts)
            wall[kind] = min(wall.get(kind, seconds), seconds)
            cpu[kind] = min(cpu.get(kind, cpu_s), cpu_s)
            del encoder
    mb = sum(len(t.encode()) for t in texts) / 1e6
    return {"mb": mb, "tokens": tokens, "docs": len(texts), "hf_s": wall["hf"], "ours_s": wall["auto"],
            "hf_ids_s": tokens / wall["hf"], "ours_ids_s": tokens / wall["auto"],
            "ratio": wall["hf"] / wall["auto"], "cpu_ratio": cpu["hf"] / cpu["auto"]}


# --- N worker processes, each encoding 1/N ---------------------------------------------------------------


def _worker(args) -> tuple[float, float, int]:
    tokenizer, kind, path, rank, world, barrier = args
    from bloomdata.tokenizer.encoder import load_encoder

    encoder = load_encoder(tokenizer, kind)
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    texts = [json.loads(line)["text"] for line in lines[len(lines) * rank // world:len(lines) * (rank + 1) // world]]
    del lines
    barrier.wait()
    start = time.time()
    _, _, tokens = encode_all(encoder, texts)
    return start, time.time(), tokens


def workers_wall(tokenizer: str, kind: str, path: Path, workers: int) -> tuple[float, int]:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(workers)
        with ctx.Pool(workers) as pool:
            results = pool.map(_worker, [(tokenizer, kind, str(path), r, workers, barrier) for r in range(workers)])
    return max(r[1] for r in results) - min(r[0] for r in results), sum(r[2] for r in results)


def workers_line(tokenizer: str, jsonl: Path, workers: int, repeat: int) -> str:
    """Both sides with the build's workers (each process 1/N of the jsonl), best of ``repeat`` interleaved."""
    walls: dict[str, float] = {}
    for kind in ("hf", "auto") * repeat:
        wall, tokens = workers_wall(tokenizer, kind, jsonl, workers)
        walls[kind] = min(walls.get(kind, wall), wall)
    texts = [json.loads(line)["text"] for line in jsonl.open()]
    docs, mb = len(texts), sum(len(t.encode()) for t in texts) / 1e6
    hf, ours = walls["hf"], walls["auto"]
    return (f"\n{workers} worker processes, 1/{workers} of the jsonl each ({mb:.1f} MB of text, {docs:,} documents, "
            f"{tokens:,} ids in all), best of {repeat}: HF {hf:.1f} s ({mb / hf:.2f} MB/s, {docs / hf:,.0f} docs/s, "
            f"{tokens / hf:,.0f} ids/s), bloomdata {ours:.1f} s ({mb / ours:.2f} MB/s, {docs / ours:,.0f} docs/s, "
            f"{tokens / ours:,.0f} ids/s): **{hf / ours:.2f}x**")


# --- memory per build worker ----------------------------------------------------------------------------


def build_memory(tokenizer: str, path: Path, workers: int, kind: str, out: Path) -> dict:
    from bench_scale import run  # this script's folder is sys.path[0]

    cmd = [sys.executable, "-m", "bloomdata.cli", "build", "--input", str(path), "--tokenizer", tokenizer,
           "--out", str(out), "--workers", str(workers), "--append-eod", "--split-by", "none", "--no-progress",
           "--encoder", kind]
    result = run(cmd)
    return {"wall_s": result["wall_s"], "workers_mb": sorted(result["procs_mb"][1:], reverse=True)[:workers]}


def make_tokenizer(args, tmp: Path) -> str:
    if args.tokenizer:
        return args.tokenizer
    out = tmp / "tokenizer"
    if args.vocab == "bloom-size":
        from bloomdata.tokenizer.bpe import save_tokenizer
        from tests.bloomdata.encoder_vocab import bloom_size_tokenizer

        texts = [json.loads(line)["text"]
                 for f in sorted(CORPUS.glob("*.jsonl")) for line in f.read_text().splitlines()]
        save_tokenizer(bloom_size_tokenizer(texts), out)
        return str(out)
    from bloomdata.readers import SourceConfig
    from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer

    train_tokenizer(TokenizerTrainConfig(sources=[SourceConfig(paths=[str(CORPUS)])], out_dir=str(out),
                                         vocab_size=args.vocab_size, show_progress=False))
    return str(out)


HEADER = ("| text | MB | docs | ids | HF ids/s | bloomdata ids/s | HF MB/s | bloomdata MB/s | HF docs/s | "
          "bloomdata docs/s | speed-up (wall) | CPU s ratio | same ids |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")


def row(name: str, r: dict) -> str:
    """One line of HEADER's table: throughput of each side over the best round's wall seconds."""
    hf, ours = r["hf_s"], r["ours_s"]
    return (f"| {name} | {r['mb']:.1f} | {r['docs']:,} | {r['tokens']:,} | {r['hf_ids_s']:,.0f} | "
            f"{r['ours_ids_s']:,.0f} | {r['mb'] / hf:.2f} | {r['mb'] / ours:.2f} | {r['docs'] / hf:,.0f} | "
            f"{r['docs'] / ours:,.0f} | **{r['ratio']:.2f}x** | {r['cpu_ratio']:.2f}x | "
            f"{'yes' if r.get('same', True) else 'NO'} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1 MB per script, 10 MB jsonl, no memory runs")
    p.add_argument("--tokenizer", help="tokenizer dir or tokenizer.json (default: train one on the corpus)")
    p.add_argument("--vocab", choices=["trained", "bloom-size"], default="trained")
    p.add_argument("--vocab-size", type=int, default=32000)
    p.add_argument("--script-mb", type=float, default=4.0)
    p.add_argument("--zipf-mb", type=int, default=20)
    p.add_argument("--mb", type=float, default=60.0, help="MB of text in the jsonl (bench_build.py's)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--skip", nargs="*", default=[], choices=["scripts", "zipf", "jsonl", "workers", "memory"])
    args = p.parse_args()
    if args.quick:
        args.script_mb, args.zipf_mb, args.mb, args.skip = 1.0, 5, 10.0, [*args.skip, "memory"]
    from bench_build import make_text
    from bench_tokenizer import make_input

    with tempfile.TemporaryDirectory(prefix="bench_encoder_") as tmp_name:
        tmp = Path(tmp_name)
        tokenizer = make_tokenizer(args, tmp)
        from bloomdata.tokenizer.encoder import load_encoder

        vocab = load_encoder(tokenizer, "hf").tokenizer.get_vocab_size()  # type: ignore[attr-defined]
        print(f"tokenizer {tokenizer}: {vocab:,} tokens; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
              f"CPUs; batches of {BATCH} documents; single-threaded best of {args.repeat}\n")
        print(HEADER)
        sets = [] if "scripts" in args.skip else [(s, script_texts(s, args.script_mb)) for s in SCRIPTS]
        if "zipf" not in args.skip:
            path = make_input(tmp / "zipf.jsonl", args.zipf_mb)
            sets.append(("Zipf, 2M words", [json.loads(line)["text"] for line in path.read_text().splitlines()]))
        jsonl = tmp / "text.jsonl"
        make_text(CORPUS, jsonl, int(args.mb * 1e6))
        if "jsonl" not in args.skip:
            sets.append((f"{args.mb:.0f} MB jsonl", [json.loads(line)["text"] for line in jsonl.open()]))
        for name, texts in sets:
            result = single_thread(tokenizer, texts, args.repeat)
            result["same"] = same_ids(tokenizer, texts)
            print(row(name, result), flush=True)
        if "workers" not in args.skip:
            print(workers_line(tokenizer, jsonl, args.workers, args.repeat), flush=True)
        if "memory" not in args.skip:
            for kind in ("hf", "auto"):
                r = build_memory(tokenizer, jsonl, args.workers, kind, tmp / f"build_{kind}")
                print(f"bloomdata build --encoder {kind}: {r['wall_s']:.1f} s, peak RSS per worker "
                      f"{', '.join(f'{mb:.0f}' for mb in r['workers_mb'])} MB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
