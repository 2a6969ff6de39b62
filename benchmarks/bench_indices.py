"""GPT sample-index and blend build time: megatron-core 0.16.1 vs bloomdata, same inputs, one run.

    python benchmarks/bench_indices.py            # 10M and 100M document-index entries + 28-language blend
    python benchmarks/bench_indices.py --quick    # 1M and 3M entries + a small blend (about a minute)
    python benchmarks/bench_indices.py --entries 1e7 --no-blend   # one case, with its cached row

Inputs are synthetic sequence lengths (lognormal, mean ~800 tokens, like web documents), so nothing is
read from disk and both sides time only the build. megatron's side runs the exact calls its
``GPTDataset._build_document_sample_shuffle_indices`` makes, in the same order on one
``RandomState(seed)``: ``_build_document_index`` (np.mgrid + shuffle), ``helpers.build_sample_idx`` (its
C++), ``_build_shuffle_index`` (numpy shuffle); the blend runs ``helpers.build_blending_indices`` and the
oversampling count of ``BlendedDataset``. Ours runs ``bloomdata.megatron.gpt_samples.build_gpt_indices`` with the C++
backend, the per-dataset counts of ``bloomdata.megatron.blend.samples_per_dataset`` and the same oversampling
check. Every array is compared (values and dtype) and the script exits 1 on any difference.

"With the cache" (the first --entries case, 1M documents x 10 epochs at 10M entries; --cache-entries 0 skips
it) times each side's dataset class end to end in one process, from the files on disk to the arrays, with
its cache directory set and empty, so both build *and* write their cache: megatron-core's
``GPTDataset(IndexedDataset(prefix), ...)`` with ``path_to_cache`` (``np.save`` of three arrays and a
description), ours ``GPTSamples(prefix, ..., cache_dir=...)`` (three arrays, their xxh3 digests taken in
memory, the marker last). The dataset's ``.idx`` holds the synthetic lengths and its ``.bin`` is sparse (no
token is read to build indices). The two sides run alternately (one round each at a time), so both see the
same load on a shared machine. Then a cache hit on each side (megatron maps its files unchecked; ours
verifies every digest), and the content check alone: xxh3 of the arrays in memory (save) and mapped (load),
as a share of our build time.

Times are wall-clock seconds, fastest of --repeat runs per side after --warmup untimed runs (default 1);
"total CPU time" is the process CPU time of the whole build (all threads), a steadier figure when other jobs
share the machine. The warm-up matters on a VM: the first builds in a process write memory the guest has not
touched yet, and first-touch page faults then cost ~0.65 ms per MB instead of ~0.12 (both sides allocate
their outputs fresh; ours are ~120 MB at 10M entries, megatron's more). ``--warmup 0`` shows cold figures.

Memory: the 100M case peaks at about 3 GB on megatron's side (mgrid's int64 grid) and 2 GB on ours.
Build threads: ours uses up to OMP_NUM_THREADS threads (default: every CPU): a drawer thread beside each
shuffle of 64K+ elements, the streaming passes, and the blend's two verified halves. megatron-core's helpers
are single-threaded here.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from typing import NamedTuple

import numpy as np

from bloomdata import durable
from bloomdata.megatron import index_builders
from bloomdata.megatron.blend import samples_per_dataset
from bloomdata.megatron.gpt_samples import GPTSamples, SampleSettings, build_gpt_indices, plan_epochs
from bloomdata.megatron.indexed import _write_index, data_file_path, index_file_path

NAMES = ["document_index", "sample_index", "shuffle_index"]


def synthetic_sizes(num_docs: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(mean=6.2, sigma=0.9, size=num_docs)  # median ~490, mean ~800 tokens
    return np.clip(sizes, 1, 200_000).astype(np.int32)


def megatron_build(sizes: np.ndarray, documents: np.ndarray, seq_length: int, num_samples: int, seed: int):
    """megatron-core's GPTDataset index build, step by step (see module docstring)."""
    from megatron.core.datasets import helpers
    from megatron.core.datasets.gpt_dataset import _build_document_index, _build_shuffle_index

    times = {}
    t0 = time.perf_counter()
    tokens = int(np.sum(sizes[documents]))
    plan = plan_epochs(tokens, seq_length, num_samples, "core")  # == GPTDataset's own (tests/bloomdata)
    rng = np.random.RandomState(seed)
    document_index = _build_document_index(documents, plan.num_epochs, rng, plan.separate_final_epoch)
    t1 = time.perf_counter()
    lengths = sizes.copy() if len(document_index) * 2 > len(sizes) else sizes
    sample_index = helpers.build_sample_idx(lengths, document_index, seq_length, plan.num_epochs, tokens, True, True)
    t2 = time.perf_counter()
    first = plan.num_samples_sans_final_epoch if plan.separate_final_epoch else sample_index.shape[0] - 1
    shuffle_index = _build_shuffle_index(first, sample_index.shape[0] - 1, rng)
    t3 = time.perf_counter()
    times = {"document_index": t1 - t0, "sample_index": t2 - t1, "shuffle_index": t3 - t2}
    return {"document_index": document_index, "sample_index": sample_index, "shuffle_index": shuffle_index}, times


def ours_build(sizes, documents, seq_length, num_samples, seed):
    arrays, _, times = build_gpt_indices(documents, sizes, num_samples,
                                         SampleSettings(seq_length, seed, "core", backend="cpp"))
    return arrays, times


def same(a: dict, b: dict) -> bool:
    return all(a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]) for k in a)


def row(label: str, theirs: float, ours: float) -> str:
    return f"  {label:<22} {theirs:10.3f} s {ours:10.3f} s {theirs / max(ours, 1e-9):8.2f}x"


def timed(fn, *args):
    """fn's (arrays, per-step wall times), plus the process CPU seconds of the whole call under "cpu"."""
    c0 = time.process_time()
    arrays, times = fn(*args)
    return arrays, {**times, "cpu": time.process_time() - c0}


class Runs(NamedTuple):
    """How each side is run: ``warmup`` untimed runs, then ``repeat`` timed ones (the fastest is kept)."""

    warmup: int
    repeat: int


def best_of(runs: Runs, fn, *args):
    """fn's arrays and its fastest times over ``runs.repeat`` runs after ``runs.warmup`` untimed ones (the machine
    is shared: take the min)."""
    for _ in range(runs.warmup):
        fn(*args)  # arrays dropped at once
    arrays, times = timed(fn, *args)
    for _ in range(runs.repeat - 1):
        del arrays
        arrays, again = timed(fn, *args)
        times = {k: min(v, again[k]) for k, v in times.items()}
    return arrays, times


def bench_single(entries: int, seq_length: int, seed: int, runs: Runs) -> tuple[float, float, bool]:
    epochs = 5
    num_docs = max(1, entries // epochs)
    sizes = synthetic_sizes(num_docs, seed)
    documents = np.arange(num_docs, dtype=np.int32)
    per_epoch = (int(sizes.sum(dtype=np.int64)) - 1) // seq_length
    num_samples = int(4.5 * per_epoch)  # 5 epochs, the last one half used: separate last epoch
    print(f"\n== single dataset: {num_docs:,} documents x {epochs} epochs = {num_docs * epochs:,} document-index "
          f"entries, {num_samples:,} samples of {seq_length}")
    theirs, t_theirs = best_of(runs, megatron_build, sizes, documents, seq_length, num_samples, seed)
    ours, t_ours = best_of(runs, ours_build, sizes, documents, seq_length, num_samples, seed)
    ok = same(theirs, ours)
    del theirs, ours
    print(f"  {'step':<22} {'megatron':>12} {'bloomdata':>12} {'ratio':>9}")
    for k in NAMES:
        print(row(k, t_theirs[k], t_ours[k]))
    total_t, total_o = (sum(v for k, v in t.items() if k != "cpu") for t in (t_theirs, t_ours))
    print(row("total", total_t, total_o))
    print(row("total CPU time", t_theirs["cpu"], t_ours["cpu"]))
    print(f"  identical arrays: {ok}")
    return total_t, total_o, ok


class StubTokenizer:
    """What megatron-core's GPTDatasetConfig reads from a tokenizer (no tokenizer is used to build indices)."""

    vocab_size = 50_000
    eod = 0
    pad = 1
    unique_identifiers = {"class": "StubTokenizer"}


def write_lengths_only_dataset(prefix: str, sizes: np.ndarray) -> None:
    """A uint16 Megatron dataset with these sequence lengths: a real .idx, a sparse .bin of the right size."""
    _write_index(index_file_path(prefix), np.dtype(np.uint16), sizes, np.arange(len(sizes) + 1, dtype=np.int64))
    with open(data_file_path(prefix), "wb") as f:
        f.truncate(int(sizes.sum(dtype=np.int64)) * 2)


def megatron_cached(prefix: str, seq_length: int, num_samples: int, seed: int, cache_dir: str):
    """megatron-core's GPTDataset from the files, its cache in ``cache_dir`` (built and written when empty)."""
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    t0 = time.perf_counter()
    config = GPTDatasetConfig(random_seed=seed, sequence_length=seq_length, tokenizer=StubTokenizer(), split="1",
                              reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
                              path_to_cache=cache_dir)
    indexed = IndexedDataset(prefix)
    ds = GPTDataset(indexed, prefix, np.arange(len(indexed), dtype=np.int32), num_samples, Split.train, config)
    arrays = {name: getattr(ds, name) for name in NAMES}
    return arrays, {"end_to_end": time.perf_counter() - t0}


def ours_cached(prefix: str, seq_length: int, num_samples: int, seed: int, cache_dir: str):
    """bloomdata's GPTSamples from the files, its cache in ``cache_dir`` (built and written when empty)."""
    t0 = time.perf_counter()
    s = GPTSamples(prefix, num_samples, SampleSettings(seq_length, seed, "core", cache_dir, backend="cpp"))
    arrays = {name: getattr(s, name) for name in NAMES}
    return arrays, {"end_to_end": time.perf_counter() - t0}


def cold(fn, workdir: str):
    """fn(..., cache_dir) with a fresh, empty cache directory each call (so every call builds and writes)."""

    def run(*args):
        cache_dir = tempfile.mkdtemp(dir=workdir, prefix="cache-")
        try:
            return fn(*args, cache_dir)
        finally:
            shutil.rmtree(cache_dir)  # after the timed call: deleting the files is not part of it

    return run


def digest_seconds(arrays: dict[str, np.ndarray], repeat: int) -> float:
    """Fastest time to xxh3 every array (what the cache checks), over ``repeat`` runs."""
    best = float("inf")
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        for a in arrays.values():
            durable.digest(a)
        best = min(best, time.perf_counter() - t0)
    return best


def best_of_alternating(runs: Runs, fns, *args) -> list:
    """(arrays, fastest times) of each fn, run in turn (a, b, a, b, ...) so that both sides see the same load
    on a shared machine; ``runs.warmup`` untimed rounds first."""
    for _ in range(runs.warmup):
        for fn in fns:
            fn(*args)
    results: list = [None] * len(fns)
    for _ in range(max(1, runs.repeat)):
        for i, fn in enumerate(fns):
            if results[i] is not None:
                results[i] = (None, results[i][1])  # drop the previous arrays before the next run
            arrays, times = timed(fn, *args)
            best = times if results[i] is None else {k: min(v, times[k]) for k, v in results[i][1].items()}
            results[i] = (arrays, best)
    return results


def bench_cached(entries: int, epochs: int, seq_length: int, seed: int, runs: Runs) -> tuple[float, float, bool]:
    """End to end with the cache on (see the module docstring): both sides from files, both writing a cache."""
    num_docs = max(1, entries // epochs)
    sizes = synthetic_sizes(num_docs, seed)
    per_epoch = (int(sizes.sum(dtype=np.int64)) - 1) // seq_length
    num_samples = int((epochs - 0.5) * per_epoch)  # the last epoch half used: separate last epoch
    print(f"\n== with the cache: {num_docs:,} documents x {epochs} epochs = {num_docs * epochs:,} document-index "
          f"entries, {num_samples:,} samples of {seq_length}, from the files, each side writing its cache")
    with tempfile.TemporaryDirectory(prefix="bench_indices_") as workdir:
        prefix = os.path.join(workdir, "lengths")
        write_lengths_only_dataset(prefix, sizes)
        args = (prefix, seq_length, num_samples, seed)
        (theirs, t_theirs), (ours, t_ours) = best_of_alternating(
            runs, [cold(megatron_cached, workdir), cold(ours_cached, workdir)], *args)
        ok = same(theirs, ours)
        del theirs
        # a cache hit: the second process of a job finds the files (megatron maps them unchecked; ours verifies)
        hit_dir = os.path.join(workdir, "hit")
        megatron_cached(*args, hit_dir)
        ours_cached(*args, hit_dir)
        (_, h_theirs), (mapped, h_ours) = best_of_alternating(runs, [megatron_cached, ours_cached], *args, hit_dir)
        ok &= same(mapped, ours)
        check_save = digest_seconds(ours, runs.repeat)  # in memory, as saved
        check_load = digest_seconds(mapped, runs.repeat)  # mapped, as loaded (page cache warm)
        nbytes = sum(a.nbytes for a in ours.values())
        del ours, mapped
    settings = SampleSettings(seq_length, seed, "core", backend="cpp")
    build_gpt_indices(np.arange(num_docs, dtype=np.int32), sizes, num_samples, settings)
    build = min(sum(build_gpt_indices(np.arange(num_docs, dtype=np.int32), sizes, num_samples, settings)[2].values())
                for _ in range(max(1, runs.repeat)))
    build = min(build, t_ours["end_to_end"])  # the build alone is faster still: the share is never flattered
    print(f"  {'step':<22} {'megatron':>12} {'bloomdata':>12} {'ratio':>9}")
    print(row("cold: build + write", t_theirs["end_to_end"], t_ours["end_to_end"]))
    print(row("hit: load (+ check)", h_theirs["end_to_end"], h_ours["end_to_end"]))
    print(row("total CPU time, cold", t_theirs["cpu"], t_ours["cpu"]))
    print(f"  content check (xxh3-128 of {nbytes / 1e6:.0f} MB): {check_save * 1e3:.1f} ms in memory at save, "
          f"{check_load * 1e3:.1f} ms mapped at load = {100 * check_save / build:.1f}% / "
          f"{100 * check_load / build:.1f}% of our build alone ({build:.3f} s, no files)")
    print(f"  identical arrays: {ok}")
    return t_theirs["end_to_end"], t_ours["end_to_end"], ok


def bench_blend(num_samples: int, seq_length: int, seed: int, docs_scale: int, runs: Runs):
    rng = np.random.default_rng(seed)
    k = 28
    # natural sizes spanning three orders of magnitude; weights by alpha=0.3 sampling, as for BLOOM
    docs = np.unique(np.geomspace(docs_scale // 400, docs_scale, k).astype(int))
    docs = np.concatenate([docs, rng.integers(docs_scale // 400, docs_scale, size=k - len(docs))])[:k]
    all_sizes = [synthetic_sizes(int(n), seed + i) for i, n in enumerate(docs)]
    tokens = np.array([s.sum(dtype=np.int64) for s in all_sizes], dtype=np.float64)
    weights = (tokens**0.3 / np.sum(tokens**0.3)).tolist()
    targets, to_build = samples_per_dataset(weights, num_samples, "core")
    size = sum(targets)
    print(f"\n== {k}-language blend: {num_samples:,} samples of {seq_length}, {int(docs.sum()):,} documents, "
          f"components built for {sum(to_build):,} samples")
    from megatron.core.datasets import helpers
    from megatron.core.datasets.utils import normalize

    t_theirs, t_ours, ok, entries = {}, {}, True, 0
    lens_theirs, lens_ours = [], []
    for i, sizes in enumerate(all_sizes):
        documents = np.arange(len(sizes), dtype=np.int32)
        theirs, tt = best_of(runs, megatron_build, sizes, documents, seq_length, to_build[i], seed)
        ours, to = best_of(runs, ours_build, sizes, documents, seq_length, to_build[i], seed)
        ok &= same(theirs, ours)
        entries += len(ours["document_index"])
        lens_theirs.append(theirs["sample_index"].shape[0] - 1)
        lens_ours.append(ours["sample_index"].shape[0] - 1)
        for key in [*NAMES, "cpu"]:
            t_theirs[key] = t_theirs.get(key, 0.0) + tt[key]
            t_ours[key] = t_ours.get(key, 0.0) + to[key]
    # the blend index itself, with BlendedDataset's weights (normalised twice) and oversampling count
    w = normalize(normalize(weights))

    def megatron_blend():
        t0 = time.perf_counter()
        index = np.zeros(size, dtype=np.int16)
        sample = np.zeros(size, dtype=np.int64)
        helpers.build_blending_indices(index, sample, w, k, size, False)
        counts = np.unique(index, return_counts=True)[1]
        return (index, sample, counts), {"blend": time.perf_counter() - t0}

    def ours_blend():
        t0 = time.perf_counter()
        index, sample = index_builders.build_blending_indices(w, size, np.int16, "cpp")
        counts = index_builders.count_datasets(index, k, "cpp")
        return (index, sample, counts), {"blend": time.perf_counter() - t0}

    (index, sample, counts), tb_theirs = best_of(runs, megatron_blend)
    (our_index, our_sample, our_counts), tb_ours = best_of(runs, ours_blend)
    ok &= np.array_equal(index, our_index) and np.array_equal(sample, our_sample) and index.dtype == our_index.dtype
    ok &= bool(np.all(counts <= np.array(lens_theirs))) and bool(np.all(our_counts <= np.array(lens_ours)))
    t_theirs["blend"], t_ours["blend"] = tb_theirs["blend"], tb_ours["blend"]
    t_theirs["cpu"] += tb_theirs["cpu"]
    t_ours["cpu"] += tb_ours["cpu"]
    print(f"  ({entries:,} document-index entries over the {k} components)")
    print(f"  {'step':<22} {'megatron':>12} {'bloomdata':>12} {'ratio':>9}")
    for key in [*NAMES, "blend"]:
        print(row(key, t_theirs[key], t_ours[key]))
    total_t, total_o = (sum(v for k, v in t.items() if k != "cpu") for t in (t_theirs, t_ours))
    print(row("total", total_t, total_o))
    print(row("total CPU time", t_theirs["cpu"], t_ours["cpu"]))
    print(f"  identical arrays: {ok}")
    return total_t, total_o, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (about a minute)")
    parser.add_argument("--entries", type=float, nargs="+", help="document-index entries per single-dataset case")
    parser.add_argument("--blend-samples", type=float, help="samples of the 28-language blend")
    parser.add_argument("--seq-length", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--repeat", type=int, help="runs per side, fastest kept (default: 3 quick, 1 full)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs per side before the timed ones")
    parser.add_argument("--cache-entries", type=float, help="entries of the with-the-cache case (default: the "
                        "first --entries case; 0: skip it)")
    parser.add_argument("--cache-epochs", type=int, default=10, help="epochs of the with-the-cache case")
    parser.add_argument("--no-blend", action="store_true", help="skip the blend case")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    if not index_builders.cpp_available():
        print("bloomdata._index_helpers is not built; run `pip install --no-deps -e .`", file=sys.stderr)
        return 2
    entries = args.entries or ([1e6, 3e6] if args.quick else [10e6, 100e6])
    blend_samples = int(args.blend_samples or (2e5 if args.quick else 3e6))
    docs_scale = 200_000 if args.quick else 2_000_000
    runs = Runs(warmup=max(0, args.warmup), repeat=args.repeat or (3 if args.quick else 1))
    print(f"megatron-core 0.16.1 vs bloomdata (C++), seq_length {args.seq_length}, seed {args.seed}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'default')}, cpus={os.cpu_count()}, "
          f"best of {runs.repeat} run(s) per side after {runs.warmup} warm-up run(s)")
    results = []
    for n in entries:
        results.append((f"{int(n):,} entries", *bench_single(int(n), args.seq_length, args.seed, runs)))
    cache_entries = int(entries[0] if args.cache_entries is None else args.cache_entries)
    if cache_entries:
        results.append((f"{cache_entries / 1e6:g}M entries, cache on",
                        *bench_cached(cache_entries, args.cache_epochs, args.seq_length, args.seed, runs)))
    if not args.no_blend:
        results.append(("28-language blend",
                        *bench_blend(blend_samples, args.seq_length, args.seed, docs_scale, runs)))
    print("\n== summary (total build time)")
    print(f"  {'case':<22} {'megatron':>12} {'bloomdata':>12} {'ratio':>9}  identical")
    for label, t_theirs, t_ours, ok in results:
        print(f"{row(label, t_theirs, t_ours)}  {ok}")
    all_ok = all(r[3] for r in results)
    print(f"\nall outputs identical: {all_ok}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
