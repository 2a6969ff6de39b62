"""`bloomdata clean`, `bloomdata build` and the tokenizer's word counting at scale: time per GB, peak memory, disk.

    python benchmarks/bench_scale.py                          # the 10 GB rehearsal (issue 32): 1, 3 and 10 GB,
                                                              # one big file and many files, every stage; hours
    python benchmarks/bench_scale.py --sizes 250 1000 --layouts big --stages clean build   # issue 24's runs
    python benchmarks/bench_scale.py --sizes 50 200 --work /tmp/quick                       # a quick look
    python benchmarks/bench_scale.py --sizes 250 --plans     # clean at 250 MB: its default plan against
                                                             # --max-rows-per-shard 2500 5000 10000 25000

Input: per size, one jsonl file of ~10 KB documents (25,000 in 250 MB, as in issue 24): 25 to 75 sentences of one
language of tests/data/corpus (27 languages), drawn at random with a fixed seed, written once under --work; the
``many`` layout is the same documents cut into files of ``--file-mb`` MB (100 files per GB by default).
The build's tokenizer is a byte-level BPE of vocabulary 3000 trained once on tests/data/corpus.

Stages, each the CLI (or, for ``count``, the library) in a fresh process with ``--workers 2``:
``clean`` (default preset), ``clean-roots`` (``--preset roots``), ``build`` (``--append-eod``) and ``count``: the
counts trainer's passes over the inputs (``bloomdata.tokenizer.counting.count_words``: sample sizes, candidates,
word counts, merged partitions) with the whole input as the sample. Per run: wall time per GB of input, CPU
seconds (the process and its Dask workers), the peak resident memory of the process tree (sampled every 0.1 s
with psutil: ``tree``) and of its largest process (``max proc``), and the disk the output directory used (its
peak, sampled every 2 s, and what is left at the end), and the largest process's peak per stage (the newest folder
the run has made: clean's filter, join, resolve, write; the build's shards; the counts pass's), and ``probe``: a
fixed Python loop's CPU seconds just before the run and, as a mean of short ones, during it, with the seconds the
hypervisor stole meanwhile (the machine's speed; it drifts on shared VMs). Goals (issue 32): s/GB at the largest
size within 10% of the smallest size's for every stage and layout; peak memory flat within 25%; the last lines say
which hold.
``--plans`` checks that every plan writes the same cleaned documents (the concatenated data files, per language,
in plan order); issue 24's goal: clean's default throughput within 10% of the best --max-rows-per-shard.
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


def stage_folders(out: Path) -> list[str]:
    """The folders a run has made so far: under OUT (the build's shards), OUT/work (clean: filter, join, resolve,
    write) and OUT/word_counts (the counts pass: keys, chosen, count, merged)."""
    found = []
    for where in (out, out / "work", out / "word_counts"):
        try:
            found += sorted(entry.name for entry in os.scandir(where) if entry.is_dir())
        except OSError:  # not made yet, or removed at the end
            pass
    return found


def probe(loops: int = 10_000_000) -> float:
    """CPU seconds of this thread for a fixed pure-Python loop, scaled to 10M turns (~1 s idle here): the machine's
    speed. This VM's speed drifts (the same 1 GB count took 68 s, then 83 s two hours later; the same 1 GB clean
    402 s, then 252 s within the hour), so the goal lines also give each time ratio over the ratio of the probes.
    Thread CPU time, not wall time, so that a probe taken while the run's workers hold every core is not counted
    waiting for one."""
    start = time.thread_time()
    sum(i * i for i in range(loops))
    return (time.thread_time() - start) * 10_000_000 / loops


def steal_s() -> float:
    """Seconds the hypervisor has kept this VM's CPUs from running (/proc/stat's steal column, all CPUs); 0 where
    there is no such file."""
    try:
        with open("/proc/stat") as f:
            return int(f.readline().split()[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def run(cmd: list[str], watch: Path | None = None) -> dict:
    """Wall seconds, CPU seconds (the CLI and every process it reaped: its Dask workers), peak RSS (MB) of the
    tree, of its largest process and of each process (``procs_mb``: the CLI first, then the others by peak),
    and, with ``watch``, the peak and final bytes under that directory (sampled every 2 s) and the largest
    process's peak per stage (``stage_mb``: a stage is the newest folder the run made, seen every 2 s). ``probe_s``
    is the probe just before the run; ``probe_run_s`` the mean of short probes (50 ms, every 20 s) during it, and
    ``steal_s`` the CPU seconds the hypervisor took meanwhile: the machine's speed over the whole run. A run too
    short for a probe during it has ``probe_run_s`` None, not the one before it: an idle probe reads slower than
    one taken during a run (1.05 against 0.85 s here), so mixing the two would skew the adjusted ratio."""
    speed, stolen, during, probe_at = probe(), steal_s(), [], time.perf_counter()
    start, used = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    root, tree_peak, peaks, disk_peak, disk_at = psutil.Process(proc.pid), 0, {}, 0, 0.0
    seen, stage_peaks = ["start"], {}
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
            seen += [name for name in stage_folders(watch) if name not in seen]
        stage_peaks[seen[-1]] = max([stage_peaks.get(seen[-1], 0), *rss.values()])
        if time.perf_counter() - probe_at > 20:
            during.append(probe(500_000))
            probe_at = time.perf_counter()
        time.sleep(0.1)
    stderr = proc.stderr.read()
    if proc.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {stderr.strip()[-500:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime
    procs = [peaks.pop(proc.pid, 0), *sorted(peaks.values(), reverse=True)]
    final = disk_bytes(watch) if watch is not None else 0
    return {"wall_s": time.perf_counter() - start, "cpu_s": cpu, "probe_s": speed,
            "probe_run_s": sum(during) / len(during) if during else None, "steal_s": steal_s() - stolen,
            "tree_mb": tree_peak / 1e6,
            "proc_mb": max(procs) / 1e6, "procs_mb": [n / 1e6 for n in procs if n > 20e6],
            "disk_peak_mb": max(disk_peak, final) / 1e6, "disk_mb": final / 1e6,
            "stage_mb": {stage: n / 1e6 for stage, n in stage_peaks.items()}}


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
            f"max proc {r['proc_mb']:4.0f} MB  disk {r.get('disk_peak_mb', 0):6.0f} MB peak, "
            f"{r.get('disk_mb', 0):6.0f} MB left; probe {r.get('probe_s', 0):.2f} s before" +
            (f", {r['probe_run_s']:.2f} s during" if r.get("probe_run_s") else "") +
            f"; steal {r.get('steal_s', 0):.0f} s" +
            ("; largest process by stage: " + ", ".join(f"{k} {v:.0f}" for k, v in r["stage_mb"].items()) + " MB"
             if r.get("stage_mb") else ""))


def split_input(src: Path, folder: Path, file_mb: int) -> Path:
    """``src`` cut at line ends into files of about ``file_mb`` MB under ``folder`` (written once)."""
    if folder.is_dir():
        return folder
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    out, size, n = None, 0, 0
    with open(src, "rb") as f:
        for row in f:
            if out is None or size >= file_mb * 1_000_000:
                if out is not None:
                    out.close()
                out, size, n = open(tmp / f"part-{n:05d}.jsonl", "wb"), 0, n + 1
            out.write(row)
            size += len(row)
    if out is not None:
        out.close()
    tmp.rename(folder)
    return folder


COUNT = """import sys
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.bpe import TokenizerTrainConfig
from bloomdata.tokenizer.counting import count_words
src, out, workers, budget = sys.argv[1:5]
s = count_words(TokenizerTrainConfig(sources=[SourceConfig(paths=[src])], out_dir=out, workers=int(workers),
                                     byte_budget=int(budget), show_progress=False))
print(s.words, s.occurrences, s.spills)
"""


def stage_command(stage: str, src: Path, out: Path, workers: int, tok: Path, mb: int) -> list[str]:
    if stage == "count":
        shutil.rmtree(out, ignore_errors=True)
        return [sys.executable, "-c", COUNT, str(src), str(out), str(workers), str(mb * 2_000_000)]
    if stage == "build":
        return cli("build", src, out, workers, ["--tokenizer", str(tok), "--append-eod"])
    return cli("clean", src, out, workers, ["--preset", "roots"] if stage == "clean-roots" else [])


def rehearsal(args: argparse.Namespace, tok: Path) -> dict[tuple[str, str], dict[int, dict]]:
    """Every stage on every layout at every size; results[(stage, layout)][mb]. With ``--drop-inputs`` a size's
    big file is deleted once its files are cut (and they once run): one input on disk at a time."""
    results: dict[tuple[str, str], dict[int, dict]] = {}
    for mb in args.sizes:
        big = make_input(args.work / f"docs_{mb}mb.jsonl", mb)
        many = args.work / f"docs_{mb}mb_files"
        for layout in sorted(args.layouts):  # big first: its file is what the many files are cut from
            src = big
            if layout == "many":
                src = split_input(big, many, args.file_mb)
                if args.drop_inputs:
                    big.unlink()
            for stage in args.stages:
                out = args.work / f"{stage}_out"
                r = run(stage_command(stage, src, out, args.workers, tok, mb), watch=out)
                results.setdefault((stage, layout), {})[mb] = r
                print(line(f"{stage} ({layout})", mb, r), flush=True)
                save(args.work, results)  # after every run: an hours-long rehearsal stopped early keeps its rows
                shutil.rmtree(out, ignore_errors=True)
        if args.drop_inputs:
            big.unlink(missing_ok=True)
            shutil.rmtree(many, ignore_errors=True)
    return results


def save(work: Path, results: dict[tuple[str, str], dict[int, dict]]) -> None:
    """WORK/results.json (the --baseline format), replaced whole."""
    tmp = work / "results.json.tmp"
    tmp.write_text(json.dumps({f"{stage} ({layout})": by_size for (stage, layout), by_size in results.items()},
                              indent=1))
    tmp.replace(work / "results.json")


def goals(results: dict[tuple[str, str], dict[int, dict]]) -> None:
    """s/GB at the largest size against the smallest (within 10%), peak memory flat (within 25%)."""
    for (stage, layout), by_size in results.items():
        lo, hi = min(by_size), max(by_size)
        if lo == hi:
            continue
        a, b = by_size[lo], by_size[hi]
        speed = (b["wall_s"] / hi) / (a["wall_s"] / lo)
        tree, proc = b["tree_mb"] / a["tree_mb"], b["proc_mb"] / a["proc_mb"]
        key = "probe_run_s" if a.get("probe_run_s") and b.get("probe_run_s") else "probe_s"
        drift = (f" (x{speed * a[key] / b[key]:.3f} over the probes' x{b[key] / a[key]:.3f}, {key})"
                 if a.get(key) and b.get(key) else "")
        print(f"{stage} ({layout}) {hi} / {lo} MB: s/GB x{speed:.3f}{drift} ({'met' if speed <= 1.10 else 'NOT met'}: "
              f"<= 1.10), peak tree x{tree:.2f}, max proc x{proc:.2f} "
              f"({'met' if max(tree, proc) <= 1.25 else 'NOT met'}: <= 1.25)", flush=True)


def plans(args: argparse.Namespace, mb: int) -> None:
    """Clean's default plan against --max-rows-per-shard plans on one file (issue 24)."""
    src = make_input(args.work / f"docs_{mb}mb.jsonl", mb)
    mb = round(src.stat().st_size / 1e6)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 3000, 10000], help="input sizes in MB")
    ap.add_argument("--layouts", nargs="+", choices=["big", "many"], default=["big", "many"])
    ap.add_argument("--stages", nargs="+", choices=["clean", "clean-roots", "build", "count"],
                    default=["clean", "clean-roots", "build", "count"])
    ap.add_argument("--file-mb", type=int, default=10, help="file size of the many-files layout")
    ap.add_argument("--drop-inputs", action="store_true", help="delete each size's inputs after its runs (disk)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--plans", action="store_true", help="clean only: the default plan against --rows")
    ap.add_argument("--rows", type=int, nargs="+", default=[2500, 5000, 10000, 25000])
    ap.add_argument("--work", type=Path, default=Path("/tmp/bloomstack_bench_scale"))
    ap.add_argument("--baseline", type=Path, action="append", default=[],
                    help="results.json of an earlier run on the same machine class: its sizes join the goal lines "
                         "(e.g. the 1 GB rows when this run takes 10 GB); repeatable")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    tok = make_tokenizer(args.work / "tokenizer")
    print(f"{time.strftime('%Y-%m-%d')}, {args.workers} workers, {psutil.cpu_count()} CPUs, load average "
          f"{psutil.getloadavg()[0]:.1f}, free disk {shutil.disk_usage(args.work).free / 1e9:.0f} GB", flush=True)
    if args.plans:
        for mb in args.sizes:
            plans(args, mb)
        return
    results = rehearsal(args, tok)
    goals(with_baselines(results, args.baseline))


def with_baselines(results: dict[tuple[str, str], dict[int, dict]],
                   paths: list[Path]) -> dict[tuple[str, str], dict[int, dict]]:
    """``results`` with the sizes of earlier runs' results.json files added (this run's figures win)."""
    merged = {key: dict(by_size) for key, by_size in results.items()}
    for path in paths:
        for label, by_size in json.loads(path.read_text()).items():
            stage, layout = label[:-1].split(" (")
            if (stage, layout) in merged:
                merged[(stage, layout)] = {int(mb): r for mb, r in by_size.items()} | merged[(stage, layout)]
    return merged


if __name__ == "__main__":
    main()
