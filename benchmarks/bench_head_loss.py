"""The LM head and its loss, forward + backward: the fused, chunked op (bloomtrain.parallel.head_loss) against the
unfused path it replaced (``F.linear`` logits, then ``masked_mean_loss``), side by side, each in a fresh process; and
against the time of its three GEMMs alone (logits = h W^T, dh = dlogits W, dW = dlogits^T h at the same shapes and
dtype: the floor the fused op's chunked matmuls can reach; ``gemms`` in the figures).

    python benchmarks/bench_head_loss.py                  # CPU fp32: hidden 96, vocab 250,880, 1,024 tokens
    python benchmarks/bench_head_loss.py --device cuda --dtype bfloat16 --hidden 1024 --tokens 8192  # bloom-560m

Each path gets the same hidden states ``[tokens, h]``, tied weight ``[V, h]`` and labels; ``--iters`` timed
forward+backward passes after one warm-up. Peak memory: the process's peak RSS on a CPU (what the step adds to a
Python process holding torch), ``torch.cuda.max_memory_allocated`` above the inputs on CUDA. The ratio is the
unfused time over the fused (above 1: the fused op is faster); ``fused_over_gemms`` is the fused time over the
three GEMMs' (1 would be no overhead beyond the matmuls). The unfused path needs ~4.3 GB per 1,024 tokens at
this vocabulary on a CPU: keep ``--tokens`` within the machine's memory.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

_DTYPES = ("float32", "bfloat16")
PATHS = ("unfused", "fused", "gemms")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=_DTYPES, default="float32")
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--hidden", type=int, default=96)
    p.add_argument("--vocab", type=int, default=250_880, help="rows of the tied weight (padded vocabulary)")
    p.add_argument("--iters", type=int, default=3, help="timed passes per path (after one warm-up)")
    p.add_argument("--json", default=None, help="also write the figures to this file (benchmarks/gpu_check.py)")
    p.add_argument("--child", choices=list(PATHS), help=argparse.SUPPRESS)  # one path, in this process
    return p


def run_path(a: argparse.Namespace) -> dict:
    """One path's timings and peak memory, in this process."""
    import torch
    import torch.nn.functional as F

    from bloomtrain.parallel.cross_entropy import masked_mean_loss
    from bloomtrain.parallel.head_loss import fused_head_loss
    from bloomtrain.parallel.state import ParallelState

    torch.set_flush_denormal(True)
    device, dtype, state = torch.device(a.device), getattr(torch, a.dtype), ParallelState.single()
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(a.tokens, a.hidden, generator=g).to(device, dtype).requires_grad_()
    weight = (torch.randn(a.vocab, a.hidden, generator=g) * 0.02).to(device, dtype).requires_grad_()
    labels = torch.randint(0, a.vocab, (a.tokens,), generator=g).to(device)

    def step():
        if a.child == "gemms":
            return _gemms(hidden, weight)
        if a.child == "fused":
            loss = fused_head_loss(hidden, weight, labels, None, state)
        else:
            loss = masked_mean_loss(F.linear(hidden, weight), labels, None, state)
        loss.backward()
        hidden.grad = weight.grad = None
        return float(loss)  # waits for the device

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated() if device.type == "cuda" else 0
    times = []
    for i in range(a.iters + 1):
        start = time.perf_counter()
        loss = step()
        if i:
            times.append(time.perf_counter() - start)
    peak = (torch.cuda.max_memory_allocated() - base) if device.type == "cuda" else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"path": a.child, "loss": loss, "step_time_s": statistics.median(times), "peak_gib": peak / 2**30}


def _gemms(hidden, weight) -> float:
    """The head's three matmuls alone (no softmax, no loss): logits, dh and dW; a stand-in dlogits (the logits)."""
    import torch

    with torch.no_grad():
        logits = hidden @ weight.T  # [tokens, V]
        dh = logits @ weight  # [tokens, h]
        dw = logits.T @ hidden  # [V, h]
        return float(dh[0, 0] + dw[0, 0])  # waits for the device


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.child:
        print(json.dumps(run_path(a)))
        return 0
    args = ["--device", a.device, "--dtype", a.dtype, "--tokens", str(a.tokens), "--hidden", str(a.hidden),
            "--vocab", str(a.vocab), "--iters", str(a.iters)]
    runs = {}
    for path in PATHS:
        out = subprocess.run([sys.executable, __file__, *args, "--child", path], capture_output=True, text=True,
                             check=True)
        runs[path] = json.loads(out.stdout.strip().splitlines()[-1])
    fused, unfused, gemms = runs["fused"], runs["unfused"], runs["gemms"]
    figures = {"device": a.device, "dtype": a.dtype, "tokens": a.tokens, "hidden": a.hidden, "vocab": a.vocab,
               "fused": fused, "unfused": unfused, "gemms": gemms,
               "ratio": unfused["step_time_s"] / fused["step_time_s"],
               "fused_over_gemms": fused["step_time_s"] / gemms["step_time_s"],
               "memory_ratio": unfused["peak_gib"] / fused["peak_gib"],
               "loss_relative_difference": abs(fused["loss"] - unfused["loss"]) / abs(unfused["loss"])}
    memory = "peak RSS" if a.device == "cpu" else "peak allocated above the inputs"
    print(f"LM head + loss fwd+bwd, {a.tokens} tokens x hidden {a.hidden} -> vocab {a.vocab:,}, {a.dtype} on "
          f"{a.device}: fused {fused['step_time_s']:.3f} s, {fused['peak_gib']:.2f} GiB; unfused "
          f"{unfused['step_time_s']:.3f} s, {unfused['peak_gib']:.2f} GiB ({memory}); fused is "
          f"{figures['ratio']:.2f}x the speed at 1/{figures['memory_ratio']:.1f} the memory; losses agree to "
          f"{figures['loss_relative_difference']:.1e}; its three GEMMs alone take {gemms['step_time_s']:.3f} s "
          f"(fused = {figures['fused_over_gemms']:.2f}x that)")
    if a.json:
        Path(a.json).write_text(json.dumps(figures, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
