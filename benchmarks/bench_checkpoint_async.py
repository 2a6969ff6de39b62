"""What a checkpoint save costs training: asynchronous (``checkpoint.async_save``) against synchronous (issue 50:
the asynchronous save stalls training for <= 15% of the synchronous save's time).

    python benchmarks/bench_checkpoint_async.py              # bench_checkpoint_verify's 1.33 GB bf16 checkpoint
    python benchmarks/bench_checkpoint_async.py --quick      # its 206 MB one
    ... --repeats N | --precision fp32

One process builds the trainer of bench_checkpoint_verify's model (8 layers, hidden 768, vocab 50k; bf16 with
DeepSpeed's BF16 optimizer: bf16 layer files, fp32 master weights and Adam's moments) and trains one iteration.
Then one save of each kind, timed apart (the first asynchronous save allocates the host buffers that every later
one reuses), and ``--repeats`` times, in rotating order:

- ``sync``: ``Checkpointer.save`` of a synchronous checkpointer: every file written, fsynced, digested, the manifest
  and ``latest`` committed; its wall time is what training stops for (the reference);
- ``async``: ``save`` of an asynchronous checkpointer over the same engine: its wall time is the stall (the state
  copied to host memory); then training steps run until the background write is committed, each timed;
- ``steps``: as many training steps with nothing in the background (the step time the overlap is measured
  against).

Every save goes to the same checkpoint directory as a training run's would (``keep_last=2``), on this machine's
disk, and fsyncs. Reported (medians): the sync save, the async stall and its ratio to the sync save (the goal),
the background write's time, and the training time the write's overlap costs (the overlapping steps' time over
as many undisturbed steps): on a GPU node the steps run on the device and the write on the host's cores; on a CPU
box the two share cores. Torch uses one thread (as bench_checkpoint_verify), leaving a core for the write.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_checkpoint_verify import _overrides  # noqa: E402 - the same model and checkpoint


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="bench_checkpoint_verify's 206 MB checkpoint")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--vocab", type=int, default=50_304)
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--repeats", type=int, default=5)
    a = parser.parse_args()
    if a.quick:
        a.layers, a.hidden, a.heads, a.vocab = 2, 512, 8, 16_384

    import torch  # noqa: PLC0415 - after argparse: --help stays fast

    from bloomtrain.checkpoint.checkpointer import Checkpointer  # noqa: PLC0415
    from bloomtrain.config import load_config  # noqa: PLC0415
    from bloomtrain.data import micro_batches  # noqa: PLC0415
    from bloomtrain.train import build_trainer  # noqa: PLC0415

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="bench-async-", dir=os.environ.get("BENCH_DIR")) as ckpt:
        overrides = [*_overrides(a, ckpt), "schedule.train_iters=100000", "data.synthetic_samples=100000",
                     "checkpoint.save_interval=null",
                     "checkpoint.keep_last=2"]
        cfg = load_config(ROOT / "configs" / "train" / "tiny-cpu.yaml", overrides)
        trainer = build_trainer(cfg)
        trainer.callbacks = []  # the loop's step alone: saves are called here
        trainer.resume()
        s = cfg.schedule
        data = micro_batches(trainer.train_data, 0, s.micro_batch_size, trainer.state.dp_rank, trainer.state.dp_size)

        def step() -> float:
            start = time.perf_counter()
            trainer._iteration(data)
            return time.perf_counter() - start

        step()  # warm-up
        sync = Checkpointer(cfg, trainer.module, trainer.state)
        background = Checkpointer(cfg, trainer.module, trainer.state)
        background.save_in_background()
        times = measure(trainer, sync, background, step, a.repeats)
        tag = Path(ckpt) / (sync.committed or "")
        size = sum(p.stat().st_size for p in tag.rglob("*") if p.is_file())
    print(json.dumps(report(size, a, times), indent=1))


def measure(trainer, sync, background, step, repeats: int) -> dict[str, list[float]]:
    """Seconds of each save and of the steps around them, ``repeats`` times in rotating order."""
    names = ("sync", "stall", "write", "overlap_steps", "plain_steps", "steps_overlapped")
    times: dict[str, list[float]] = {name: [] for name in names}

    def save(checkpointer) -> float:
        start = time.perf_counter()
        checkpointer.save(trainer.pos.iteration, trainer.pos.as_dict(), {})
        return time.perf_counter() - start

    def run_sync() -> None:
        step()  # a new iteration to save
        times["sync"].append(save(sync))

    def run_async() -> None:
        step()
        times["stall"].append(save(background))
        overlapped = []
        while background.pending is not None and not background.pending.done():
            overlapped.append(step())
        background.wait()
        times["write"].append(background.write_s)
        times["overlap_steps"].append(sum(overlapped))
        times["steps_overlapped"].append(len(overlapped))
        times["plain_steps"].append(sum(step() for _ in overlapped))  # as many steps, nothing in the background

    ways = [run_sync, run_async]
    for way in ways:  # the first save of each kind, apart: the asynchronous one allocates its host buffers
        way()
    first = {name: values.pop() for name, values in times.items()}
    for i in range(repeats):
        for way in ways[i % 2:] + ways[:i % 2]:
            way()
    return {**times, "first_sync": [first["sync"]], "first_stall": [first["stall"]]}


def report(size: int, a: argparse.Namespace, times: dict[str, list[float]]) -> dict:
    med = {name: statistics.median(values) for name, values in times.items()}
    overlap_cost = med["overlap_steps"] - med["plain_steps"]
    result = {
        "date": time.strftime("%Y-%m-%d"), "machine": f"{platform.node()} ({os.cpu_count()} CPUs, "
                                                      f"load average {os.getloadavg()[0]:.1f})",
        "precision": a.precision, "checkpoint_bytes": size, "repeats": a.repeats,
        "first_sync_save_s": round(med["first_sync"], 3), "first_async_stall_s": round(med["first_stall"], 3),
        "sync_save_s": round(med["sync"], 3), "async_stall_s": round(med["stall"], 3),
        "stall_over_sync": round(med["stall"] / med["sync"], 4),
        "background_write_s": round(med["write"], 3), "steps_during_write": med["steps_overlapped"],
        "overlap_cost_s": round(overlap_cost, 3),
        "stall_and_overlap_over_sync": round((med["stall"] + max(overlap_cost, 0.0)) / med["sync"], 4),
        "all": {name: [round(v, 3) for v in values] for name, values in times.items()},
    }
    print(f"checkpoint save of {size / 1e9:.2f} GB ({a.precision}, medians of {a.repeats}): synchronous "
          f"{med['sync']:.2f} s; asynchronous: training stalls {med['stall']:.2f} s = "
          f"{100 * result['stall_over_sync']:.1f}% of it (goal <= 15%), the background write takes "
          f"{med['write']:.2f} s "
          f"over {med['steps_overlapped']:g} steps, which ran {overlap_cost:+.2f} s longer than undisturbed ones "
          f"(stall + overlap: {100 * result['stall_and_overlap_over_sync']:.1f}% of the synchronous save); the first "
          f"asynchronous save, which allocates the host buffers, stalled {med['first_stall']:.2f} s")
    return result


if __name__ == "__main__":
    main()
