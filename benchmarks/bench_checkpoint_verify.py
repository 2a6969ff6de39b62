"""The cost of checking a checkpoint's digests when a run resumes (issue 28: under 5% of the load time).

    python benchmarks/bench_checkpoint_verify.py --quick          # 206 MB: 2 layers, hidden 512, vocab 16k
    python benchmarks/bench_checkpoint_verify.py                  # 8 layers, hidden 768, vocab 50k
    ... --precision fp32 | --cold | --repeats N

One process builds the trainer (timed: the engine's build, which a resume's check overlaps), trains one iteration
of a BLOOM of the given shape and saves its checkpoint (bf16 by default, BLOOM's: DeepSpeed's BF16 optimizer with
fp32 master weights and Adam's moments; the manifest of digests). Then, in rotating order, ``--repeats`` times
each, it times ``Checkpointer.load()`` as the trainer calls it:

- ``unchecked``: the reference, ``_verified`` replaced by the identity: no digest is read;
- ``inline``: the check runs inside the load (every file memory-mapped and hashed with xxh3-128 before any tensor
  is read), nothing overlapping it: a fallback to an earlier tag checks that way;
- ``after_build``: as ``bloomtrain.train.build_trainer`` does: the check starts in a thread (``start_check``) before
  the engine is built, and the load takes its verdict. Here the thread is joined (``check_in_thread_s``) instead
  of building the engine again: a resume's load waits for nothing when that time is under ``engine_build_s``
  (the build of this run's trainer, timed), given a core the build leaves free, as on a GPU node;

and the check alone (``_check``). By default every load reads the page cache, the worst case for the check;
``--cold`` evicts the checkpoint's pages before each load (``posix_fadvise(DONTNEED)``), as on a node resuming
after a requeue. Prints medians of wall and CPU seconds and the ratios to ``unchecked``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _overrides(a: argparse.Namespace, ckpt: str) -> list[str]:
    return [
        "model.preset=tiny", f"model.num_layers={a.layers}", f"model.hidden_size={a.hidden}",
        f"model.num_heads={a.heads}", f"model.vocab_size={a.vocab}", f"model.pad_vocab_size_to={a.vocab}",
        f"optim.precision={a.precision}", "optim.force_bf16=true", "schedule.micro_batch_size=1",
        "schedule.global_batch_size=1", "schedule.train_iters=1", "schedule.warmup_samples=0",
        "schedule.decay_samples=1000", "logging.eval_interval=null",
        "logging.tensorboard=false", "data.synthetic_samples=8", f"checkpoint.dir={ckpt}", "checkpoint.save_interval=1",
        "model.kernels=torch",
    ]


def _evict(folder: Path) -> None:
    """Drop the folder's files from the page cache (they are fsynced: their pages are clean), as after a requeue."""
    for path in folder.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _timed(fn, cold: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process: every thread) of ``fn()``."""
    if cold is not None:
        _evict(cold)
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 176 MB checkpoint (2 layers, hidden 512, vocab 16k)")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50_304)
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16",
                        help="bf16: BLOOM's (DeepSpeed's BF16 optimizer with ZeRO-1: fp32 master weights and moments "
                             "in optimizer files, bf16 weights in layer files); fp32: the tests' exact mode")
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--cold", action="store_true", help="evict the checkpoint from the page cache before each load")
    a = parser.parse_args()
    if a.quick:
        a.layers, a.hidden, a.heads, a.vocab = 2, 512, 8, 16_384

    import torch  # noqa: PLC0415 - after argparse: --help stays fast

    from bloomtrain.config import load_config  # noqa: PLC0415
    from bloomtrain.train import build_trainer  # noqa: PLC0415

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="bench-verify-") as ckpt:
        cfg = load_config(ROOT / "configs" / "train" / "tiny-cpu.yaml", _overrides(a, ckpt))
        start = time.perf_counter()
        trainer = build_trainer(cfg)  # the engine's build: what a resume's check overlaps
        build_s = time.perf_counter() - start
        trainer.fit()
        times = measure(trainer.checkpointer, cfg, Path(ckpt) / "global_step1", a, build_s)
        size = sum(p.stat().st_size for p in (Path(ckpt) / "global_step1").rglob("*") if p.is_file())
    print(json.dumps(report(size, build_s, a, times), indent=1))


def measure(checkpointer, cfg, tag: Path, a: argparse.Namespace, build_s: float) -> dict[str, list]:
    """(wall, CPU) seconds of each way to load, ``a.repeats`` times, in rotating order (a load that follows another
    reuses the memory that one freed)."""
    from bloomtrain.checkpoint.checkpointer import start_check  # noqa: PLC0415

    def unchecked() -> None:
        checkpointer._verified = lambda t: t  # the reference: no digest check
        try:
            checkpointer.load()
        finally:
            del checkpointer._verified

    def inline() -> None:
        checkpointer.precheck = None  # the check runs inside the load, nothing overlaps it
        checkpointer.load()

    def after_build() -> None:
        """As build_trainer does: the check starts, and is done by the time the engine is built (a resume's load
        then waits for nothing); here its thread is joined instead of building an engine again."""
        if a.cold:
            _evict(tag)  # before the check: its reads bring in the pages the load then reads, as on a resume
        checkpointer.precheck = start_check(cfg)
        times["check_in_thread"].append(_timed(checkpointer.precheck.verdict))

    ways = {"unchecked": unchecked, "inline": inline, "after_build": checkpointer.load}
    times: dict[str, list] = {name: [] for name in [*ways, "check_alone", "check_in_thread"]}
    for i in range(a.repeats):
        order = list(ways)[i % 3:] + list(ways)[:i % 3]
        for name in order:
            if name == "after_build":
                after_build()
            times[name].append(_timed(ways[name], tag if a.cold and name != "after_build" else None))
        checkpointer.precheck = None
        times["check_alone"].append(_timed(lambda: checkpointer._check(tag.name), tag if a.cold else None))
    return times


def report(size: int, build_s: float, a: argparse.Namespace, times: dict[str, list]) -> dict:
    """Medians of wall and CPU seconds (every thread of the process), and the ratios the goal is about."""
    result: dict = {"page_cache": "cold" if a.cold else "warm", "precision": a.precision, "checkpoint_bytes": size,
                    "repeats": a.repeats, "engine_build_s": round(build_s, 3)}
    for k, clock in ((0, "wall"), (1, "cpu")):
        med = {name: statistics.median(t[k] for t in pairs) for name, pairs in times.items()}
        base = med["unchecked"]
        result[clock] = {**{f"{name}_s": round(v, 4) for name, v in med.items()},
                         "check_alone_over_load": round(med["check_alone"] / base, 4),
                         "inline_over_unchecked": round(med["inline"] / base, 4),
                         "after_build_over_unchecked": round(med["after_build"] / base, 4)}
    wall, cpu = result["wall"], result["cpu"]
    print(f"digest check of {size / 1e6:.0f} MB ({a.precision}, {result['page_cache']} page cache, medians of "
          f"{a.repeats}): the check alone {wall['check_alone_s']:.3f} s wall = "
          f"{100 * wall['check_alone_over_load']:.1f}% "
          f"of a load without it ({wall['unchecked_s']:.3f} s; CPU {100 * cpu['check_alone_over_load']:.1f}%); a load "
          f"that checks inline: {wall['inline_over_unchecked']:.3f}x; a load whose check ran during the engine build "
          f"({build_s:.1f} s): {wall['after_build_over_unchecked']:.3f}x; CPU: {cpu['inline_over_unchecked']:.3f}x, "
          f"{cpu['after_build_over_unchecked']:.3f}x (goal: < 1.05x)")
    return result


if __name__ == "__main__":
    main()
