"""GPT sample-index and blend build time: megatron-core 0.16.1 vs bloomdata, same inputs, one run.

    python benchmarks/bench_indices.py            # 10M and 100M document-index entries + 28-language blend
    python benchmarks/bench_indices.py --quick    # 1M and 3M entries + a small blend (about a minute)

Inputs are synthetic sequence lengths (lognormal, mean ~800 tokens, like web documents), so nothing is
read from disk and both sides time only the build. megatron's side runs the exact calls its
``GPTDataset._build_document_sample_shuffle_indices`` makes, in the same order on one
``RandomState(seed)``: ``_build_document_index`` (np.mgrid + shuffle), ``helpers.build_sample_idx`` (its
C++), ``_build_shuffle_index`` (numpy shuffle); the blend runs ``helpers.build_blending_indices`` and the
oversampling count of ``BlendedDataset``. Ours runs ``bloomdata.samples.build_gpt_indices`` with the C++
backend, the per-dataset counts of ``bloomdata.blend.samples_per_dataset`` and the same oversampling
check. Every array is compared (values and dtype) and the script exits 1 on any difference.

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
import sys
import time
import warnings
from typing import NamedTuple

import numpy as np

from bloomdata.megatron import index_builders
from bloomdata.megatron.blend import samples_per_dataset
from bloomdata.megatron.gpt_samples import build_gpt_indices, plan_epochs

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
    arrays, _, times = build_gpt_indices(documents, sizes, seq_length, num_samples, seed, "core", "cpp")
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
    results.append(("28-language blend", *bench_blend(blend_samples, args.seq_length, args.seed, docs_scale, runs)))
    print("\n== summary (total build time)")
    print(f"  {'case':<22} {'megatron':>12} {'bloomdata':>12} {'ratio':>9}  identical")
    for label, t_theirs, t_ours, ok in results:
        print(f"{row(label, t_theirs, t_ours)}  {ok}")
    all_ok = all(r[3] for r in results)
    print(f"\nall outputs identical: {all_ok}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
