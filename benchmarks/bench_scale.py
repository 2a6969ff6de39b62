"""`bloomdata clean` and `bloomdata build` at scale: time per GB and peak memory, and clean's shard plans.

    python benchmarks/bench_scale.py                         # clean + build at 250 MB and 1 GB, 2 workers
    python benchmarks/bench_scale.py --sizes 250 --plans     # clean at 250 MB: its default plan against
                                                             # --max-rows-per-shard 2500 5000 10000 25000
    python benchmarks/bench_scale.py --sizes 50 --plans --rows 1000 5000   # a quick look

Input: one jsonl file per size of ~10 KB documents (25,000 in 250 MB, as in issue 24): 25 to 75 sentences of one
language of tests/data/corpus (27 languages), drawn at random with a fixed seed, written once under --work.
The build's tokenizer is a byte-level BPE of vocabulary 3000 trained once on tests/data/corpus.

Each run is the CLI in a fresh process (``python -m bloomdata.cli clean|build --input FILE --workers 2``): its wall
time per GB of input, its CPU seconds (the CLI and its Dask workers: less sensitive than wall time to a loaded
machine, though a plan's gain is in wall time), and the peak resident memory of the process tree (the CLI and its Dask workers, sampled
every 0.1 s with psutil: ``tree``) and of its largest process (``max proc``). ``--plans`` also checks that every
plan writes the same cleaned documents (the concatenated data files, per language, in plan order). Goal (issue
24): clean's default throughput within 10% of the best --max-rows-per-shard on one 250 MB file with 2 workers.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
from bench_clean import sentence_pools  # this script's folder is sys.path[0]

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "data" / "corpus"


def make_input(path: Path, mb: int, seed: int = 0) -> Path:
    """~``mb`` MB of ~10 KB single-language documents (written once; reused when present)."""
    if path.is_file():
        return path
    rng = random.Random(seed)
    pools = sentence_pools(CORPUS)
    langs, size, tmp = sorted(pools), 0, path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as out:
        while size < mb * 1_000_000:
            lang = rng.choice(langs)
            text = " ".join(rng.choices(pools[lang], k=rng.randint(25, 75)))
            line = json.dumps({"text": text, "lang": lang}, ensure_ascii=False) + "\n"
            out.write(line)
            size += len(line.encode("utf-8"))
    tmp.rename(path)
    return path


def make_tokenizer(out: Path) -> Path:
    if not (out / "tokenizer.json").is_file():
        sys.path.insert(0, str(REPO))
        from bloomdata.readers import SourceConfig
        from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer

        train_tokenizer(TokenizerTrainConfig(sources=[SourceConfig(paths=[str(CORPUS)])], out_dir=str(out),
                                             vocab_size=3000, byte_budget=1_000_000, seed=0, show_progress=False))
    return out


def disk_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (0 when it does not exist)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while we walked
                pass
    return total


def run(cmd: list[str], watch: Path | None = None) -> dict:
    """Wall seconds, CPU seconds (the CLI and every process it reaped: its Dask workers), peak RSS (MB) of the
    tree, of its largest process and of each process (``procs_mb``: the CLI first, then the others by peak),
    and, with ``watch``, the peak and final bytes under that directory (sampled every 2 s), for one CLI run."""
    start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    root, tree_peak, peaks, disk_peak, disk_at = psutil.Process(proc.pid), 0, {}, 0, 0.0
    while proc.poll() is None:
        try:
            rss = {p.pid: p.memory_info().rss for p in [root, *root.children(recursive=True)]}
        except psutil.Error:
            rss = {}
        tree_peak = max(tree_peak, sum(rss.values()))
        for pid, n in rss.items():
            peaks[pid] = max(peaks.get(pid, 0), n)
        if watch is not None and time.perf_counter() - disk_at > 2:
            disk_peak, disk_at = max(disk_peak, disk_bytes(watch)), time.perf_counter()
        time.sleep(0.1)
    stderr = proc.stderr.read()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {stderr.strip()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime
    procs = [peaks.pop(proc.pid, 0), *sorted(peaks.values(), reverse=True)]
    final = disk_bytes(watch) if watch is not None else 0
    return {"wall_s": time.perf_counter() - start, "cpu_s": cpu, "tree_mb": tree_peak / 1e6,
            "proc_mb": max(procs) / 1e6, "procs_mb": [n / 1e6 for n in procs if n > 20e6],
            "disk_peak_mb": max(disk_peak, final) / 1e6, "disk_mb": final / 1e6}


def cli(command: str, src: Path, out: Path, workers: int, extra: list[str]) -> list[str]:
    shutil.rmtree(out, ignore_errors=True)
    return [sys.executable, "-m", "bloomdata.cli", command, "--input", str(src), "--out", str(out),
            "--workers", str(workers), "--no-progress", *extra]


def cleaned(out: Path) -> dict[str, bytes]:
    """Every language's cleaned documents, the data files concatenated in name (= plan) order."""
    import zstandard

    texts: dict[str, bytes] = {}
    for path in sorted((out / "data").rglob("*.jsonl.zst")):
        with open(path, "rb") as f:
            data = zstandard.ZstdDecompressor().stream_reader(f).read()
        texts[path.parent.name] = texts.get(path.parent.name, b"") + data
    return texts


def line(what: str, mb: int, r: dict) -> str:
    return (f"{what:<34} {mb:>5} MB  {r['wall_s']:7.1f} s  {r['wall_s'] / (mb / 1000):6.0f} s/GB  "
            f"{mb / r['wall_s']:5.2f} MB/s  CPU {r['cpu_s']:6.0f} s  tree {r['tree_mb']:5.0f} MB  "
            f"max proc {r['proc_mb']:4.0f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[250, 1000], help="input sizes in MB")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--plans", action="store_true", help="clean only: the default plan against --rows")
    ap.add_argument("--rows", type=int, nargs="+", default=[2500, 5000, 10000, 25000])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bloomstack_bench_scale"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(args.work / "tokenizer")
    print(f"{time.strftime('%Y-%m-%d')}, {args.workers} workers, {psutil.cpu_count()} CPUs")
    for mb in args.sizes:
        src = make_input(args.work / f"docs_{mb}mb.jsonl", mb)
        mb = round(src.stat().st_size / 1e6)
        if args.plans:
            runs = {"default": [], **{f"--max-rows-per-shard {n}": ["--max-rows-per-shard", str(n)] for n in args.rows}}
            results, reference = {}, None
            for label, extra in runs.items():
                out = args.work / "clean_out"
                results[label] = run(cli("clean", src, out, args.workers, extra))
                print(line(f"clean {label}", mb, results[label]), flush=True)
                texts = cleaned(out)
                reference = reference or texts
                assert texts == reference, f"clean {label} wrote other documents than the default plan"
            best = min(results.values(), key=lambda r: r["wall_s"])
            print(f"clean default / best plan throughput: {best['wall_s'] / results['default']['wall_s']:.3f} "
                  "(same documents for every plan)")
            continue
        print(line("clean", mb, run(cli("clean", src, args.work / "clean_out", args.workers, []))), flush=True)
        build = cli("build", src, args.work / "build_out", args.workers, ["--tokenizer", str(tok), "--append-eod"])
        print(line("build", mb, run(build)), flush=True)


if __name__ == "__main__":
    main()
