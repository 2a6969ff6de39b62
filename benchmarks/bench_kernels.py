"""Fused kernels vs eager PyTorch vs torch.compile (vs apex on a GPU), per kernel and per model step.

    python benchmarks/bench_kernels.py --quick            # CPU, small shapes, ~1 minute after the build
    python benchmarks/bench_kernels.py --device cuda      # GPU: adds achieved bandwidth vs the card's peak

Every row times forward + backward (the training cost) and prints milliseconds per implementation
and the speed-up of each against eager PyTorch ("torch", the reference run). On a GPU it also
times the forward alone and converts it to achieved DRAM bandwidth (bytes each op must move, see
``_bytes``) against the card's peak from PEAK_GBPS. Goals (issue 5): GPU >= 80 % of peak on large
shapes and >= 1.5x eager; CPU whole-model step >= 1.3x eager.

The model-step table has two extra rows that split the fused gain (``_model_variants``): the fused
kernels with full-square attention, and the torch kernels with block-causal attention.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from bloomtrain.kernels import KernelSet, get_kernels
from bloomtrain.kernels.attention import block_bounds
from bloomtrain.model.alibi import alibi_slopes

# Peak DRAM bandwidth in GB/s by device-name substring (vendor datasheets), most specific first.
PEAK_GBPS = {
    "H200": 4800.0,
    "H100 PCIe": 2000.0,
    "H100": 3350.0,  # SXM5 HBM3
    "A100-SXM4-80GB": 2039.0,
    "A100 80GB PCIe": 1935.0,
    "A100": 1555.0,  # 40 GB
}


def peak_gbps(name: str) -> float | None:
    return next((v for k, v in PEAK_GBPS.items() if k in name), None)


def _time(fn: Callable[[], object], device: str, warmup: int, iters: int) -> float:
    """Median milliseconds of ``fn`` over ``iters`` runs."""
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(warmup):
        fn()
    sync()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def _cases(device: str, quick: bool, dtype: torch.dtype):
    """(op name, shape label, inputs builder, call(kernels, *inputs), bytes moved by the forward)."""
    elt = torch.finfo(dtype).bits // 8
    if device == "cuda":
        rows, hidden = (4096, 4096) if quick else (16384, 14336)
        heads, seq = (8, 1024) if quick else (16, 2048)
    else:
        rows, hidden = (512, 512) if quick else (2048, 1024)
        heads, seq = (4, 128) if quick else (8, 512)
    ffn = 4 * hidden

    def t(*shape):
        return torch.randn(*shape, device=device, dtype=dtype, requires_grad=True)

    slopes = alibi_slopes(heads).to(device)
    yield ("layer_norm", f"{rows}x{hidden}", lambda: (t(rows, hidden), t(hidden), t(hidden)),
           lambda k, x, w, b: k.layer_norm(x, w, b, 1e-5), 2 * rows * hidden * elt)
    yield ("bias_gelu", f"{rows}x{ffn}", lambda: (t(rows, ffn), t(ffn)),
           lambda k, x, b: k.bias_gelu(x, b), 2 * rows * ffn * elt)
    # Causal: the fused kernel reads the lower triangle and writes the whole square.
    yield ("alibi_softmax", f"1x{heads}x{seq}x{seq}", lambda: (t(1, heads, seq, seq),),
           lambda k, s: k.alibi_softmax(s, slopes, 0.125), int(1.5 * heads * seq * seq * elt))


# Bytes an op must move forward + backward, over its forward's: LayerNorm and bias-GeLU read x and write y, then read
# dy and x and write dx (5 tensors against 2).
FWD_BWD_BYTES = {"layer_norm": 2.5, "bias_gelu": 2.5}


def bench_kernels(device: str, quick: bool, kinds: list[str], dtype: torch.dtype,
                  copy: float | None = None) -> list[dict]:
    warmup, iters = (2, 5) if quick else (5, 20)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    peak = peak_gbps(name) if device == "cuda" else None
    print(f"\n== per kernel, forward+backward, {device} ({name}), {dtype}; ratios vs torch (eager) ==")
    header = f"{'op':<14}{'shape':<20}" + "".join(f"{k + ' ms':>14}" for k in kinds)
    header += "".join(f"{k + ' x':>10}" for k in kinds if k != "torch")
    if peak:
        header += f"{'fused GB/s':>12}{'% peak':>8}"
    print(header)
    rows = []
    for op, label, make, call, nbytes in _cases(device, quick, dtype):
        inputs = make()
        times = {}
        for kind in kinds:
            k = get_kernels(kind)

            def step(k=k, call=call, inputs=inputs):
                out = call(k, *inputs)
                torch.autograd.grad(out, inputs, torch.ones_like(out))

            times[kind] = _time(step, device, warmup, iters)
        line = f"{op:<14}{label:<20}" + "".join(f"{times[k]:>14.3f}" for k in kinds)
        line += "".join(f"{times['torch'] / times[k]:>10.2f}" for k in kinds if k != "torch")
        rows.append({"op": op, "shape": label, "ms": times, "speedup_vs_torch": {k: times["torch"] / times[k]
                                                                               for k in kinds if k != "torch"}})
        if op in FWD_BWD_BYTES and copy:  # each kind's forward + backward against the copy bandwidth
            moved = FWD_BWD_BYTES[op] * nbytes
            rows[-1]["fwd_bwd_gbps"] = {k: moved / times[k] / 1e6 for k in kinds}
            rows[-1]["fwd_bwd_fraction_of_copy"] = {k: moved / times[k] / 1e6 / copy for k in kinds}
        suffix = ("  fwd+bwd % of copy: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in
                                                     rows[-1]["fwd_bwd_fraction_of_copy"].items())
                  if "fwd_bwd_fraction_of_copy" in rows[-1] else "")
        if peak:
            with torch.no_grad():
                fused = get_kernels("fused")
                fwd = _time(lambda c=call, i=inputs, f=fused: c(f, *i), device, warmup, iters)
            gbps = nbytes / fwd / 1e6
            line += f"{gbps:>12.0f}{100 * gbps / peak:>7.0f}%"
            rows[-1].update(fused_forward_gbps=gbps, peak_gbps=peak, fraction_of_peak=gbps / peak)
        print(line + suffix)
    return rows


def copy_gbps(device: str, warmup: int, iters: int) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second / 1e9): the ceiling of an elementwise op."""
    x = torch.empty(1 << 28, dtype=torch.uint8, device=device)  # 256 MiB, well past every cache
    y = torch.empty_like(x)
    ms = _time(lambda: y.copy_(x), device, warmup, iters)
    return 2 * x.numel() / ms / 1e6


def _attention_impls(device: str):
    """(name, dropout p, call(q, k, v, slopes)) for every attention implementation worth timing on ``device``."""
    import torch.nn.functional as F  # noqa: PLC0415

    from bloomtrain.kernels.attention import attention_reference  # noqa: PLC0415
    from bloomtrain.kernels.flash_attention import flash_attention  # noqa: PLC0415

    fused = get_kernels("fused")
    impls = [("bloomtrain fused (block-causal / full square)", p,
              lambda q, k, v, s, p=p: fused.attention(q, k, v, s, q.shape[-1] ** -0.5, None, p)) for p in (0.0, 0.1)]
    impls.append(("torch reference (full square)", 0.1, lambda q, k, v, s: attention_reference(
        q, k, v, s, q.shape[-1] ** -0.5, None, 0.1, softmax=get_kernels("torch").alibi_softmax)))
    if device != "cuda":
        return impls
    impls += [("bloomtrain flash (Triton)", p,
               lambda q, k, v, s, p=p: flash_attention(q, k, v, s, q.shape[-1] ** -0.5, p))
              for p in (0.0, 0.1)]
    impls += [("SDPA flash, causal, no ALiBi", p,
               lambda q, k, v, s, p=p: F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p))
              for p in (0.0, 0.1)]
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention  # noqa: PLC0415
    except ImportError:
        return impls
    flex = torch.compile(flex_attention)
    masks: dict[tuple[int, int], object] = {}  # the block mask is built once per shape, outside the timing

    def flex_alibi(q, k, v, slopes):
        def alibi(score, b, h, i, j):
            return score + slopes[h] * (j - i)

        key = (q.shape[2], k.shape[2])
        if key not in masks:
            masks[key] = create_block_mask(lambda b, h, i, j: j <= i, None, None, *key, device=device)
        return flex(q, k, v, score_mod=alibi, block_mask=masks[key])

    impls.append(("flex_attention, ALiBi + causal block mask", 0.0, flex_alibi))
    return impls


def bench_attention(device: str, quick: bool, dtype: torch.dtype) -> list[dict]:
    """Causal ALiBi attention, forward + backward, at BLOOM's training shapes (560m: hd 64; 1b7 / 176B: hd 128)."""
    warmup, iters = (2, 5) if quick else (5, 20)
    shapes = [(4, 16, 2048, 64), (4, 16, 2048, 128)] if device == "cuda" else [(1, 4, 256, 64)]
    rows = []
    for b, heads, s, hd in shapes:
        print(f"\n== attention [{b}, {heads}, {s}, {hd}], {dtype}, forward+backward ==")
        gen = torch.Generator(device).manual_seed(0)
        q, k, v = (torch.randn(b, heads, s, hd, device=device, dtype=dtype, generator=gen, requires_grad=True)
                   for _ in range(3))
        slopes = alibi_slopes(heads).to(device)
        flops = 3.5 * 2 * b * heads * s * s * hd  # causal: half the square's 4 b h s^2 hd forward, x3.5 with backward
        for name, p, call in _attention_impls(device):
            def step(call=call, inputs=(q, k, v), slopes=slopes):
                out = call(*inputs, slopes)
                torch.autograd.grad(out, inputs, torch.ones_like(out))

            try:
                ms = _time(step, device, warmup, iters)
            except Exception as exc:  # an implementation this torch build lacks is a row, not a crash
                print(f"{name:<46}{'dropout ' + str(p):<14}failed: {type(exc).__name__}: {str(exc)[:80]}")
                continue
            print(f"{name:<46}{'dropout ' + str(p):<14}{ms:>9.3f} ms {flops / ms / 1e9:>8.1f} TFLOP/s", flush=True)
            rows.append({"shape": [b, heads, s, hd], "impl": name, "dropout": p, "ms": ms,
                         "tflops": flops / ms / 1e9})
    return rows


def _set_kernels(model, kernels) -> None:
    """Swap the kernel set of every module of a built model (the attribution variants below)."""
    for module in model.modules():
        if hasattr(module, "kernels"):
            module.kernels = kernels


def _blocked_composition(softmax):
    """Block-causal attention as plain autograd over any softmax: what the reference would gain from blocks."""
    def attention(q, k, v, slopes, scale, mask=None, dropout_p=0.0):
        return torch.cat([torch.matmul(softmax(torch.matmul(q[:, :, lo:hi], k[:, :, :hi].transpose(-1, -2)),
                                               slopes, scale), v[:, :, :hi])
                          for lo, hi in block_bounds(q.shape[2])], dim=2)
    return attention


def _model_variants(kinds: list[str]) -> list[tuple[str, str, KernelSet | None]]:
    """(label, config kind, kernel set swapped in after the build or None) for the model-step table.

    Besides the kinds, two rows split the fused gain: the fused kernels with the full-square attention
    (the elementwise kernels' share), and the torch kernels with block-causal attention (how much of the
    attention gain the reference would get from the blocking alone).
    """
    from bloomtrain.kernels.dispatch import fused_alibi_softmax, fused_bias_gelu, fused_layer_norm  # noqa: PLC0415
    from bloomtrain.kernels.reference import alibi_softmax, bias_gelu, layer_norm  # noqa: PLC0415

    rows = [(kind, kind, None) for kind in kinds]
    rows.insert(2, ("fused, square attn", "fused",
                    KernelSet("fused-square", fused_layer_norm, fused_bias_gelu, fused_alibi_softmax)))
    rows.insert(3, ("torch, block attn", "torch",
                    KernelSet("torch-blocks", layer_norm, bias_gelu, alibi_softmax,
                              _blocked_composition(alibi_softmax))))
    return rows


def bench_model(device: str, quick: bool, kinds: list[str], dtype: torch.dtype) -> list[dict]:
    from bloomtrain.model.bloom import BloomModel  # noqa: PLC0415
    from bloomtrain.model.config import ModelConfig  # noqa: PLC0415

    if device == "cuda":
        shapes = [(2, 1024, 16, 4, 1024)] if quick else [(4, 2048, 16, 8, 2048)]
    else:
        # A short-sequence shape (matmul-bound: the linear layers are ~75% of the eager step) and BLOOM's
        # training sequence length, 2048, where attention is about half of the work.
        shapes = [(2, 256, 4, 2, 256)] if quick else [(4, 512, 8, 4, 512), (2, 512, 8, 1, 2048)]
    vocab = 1024
    warmup, iters = (2, 3) if quick else (2, 7)
    rows = []
    for layers, hidden, heads, batch, seq in shapes:
        print(f"\n== model step (forward + loss + backward), {device}, {dtype}: layers={layers} hidden={hidden} "
              f"heads={heads} batch={batch} seq={seq} vocab={vocab} ==")
        ids = torch.randint(0, vocab, (batch, seq + 1), device=device, generator=None)
        times = {}
        for label, kind, swap in _model_variants(kinds):
            config = ModelConfig(num_layers=layers, hidden_size=hidden, num_heads=heads, vocab_size=vocab,
                                 pad_vocab_size_to=vocab, seq_length=seq, kernels=kind)
            torch.manual_seed(0)
            model = BloomModel(config, dtype=dtype, device=device)
            if swap is not None:
                _set_kernels(model, swap)

            def step(model=model, ids=ids):
                loss = model.loss(model(ids[:, :-1]), ids[:, 1:])
                loss.backward()

            times[label] = _time(step, device, warmup, iters)
            print(f"{label:<20}{times[label]:>10.1f} ms   x{times['torch'] / times[label]:.2f} vs torch", flush=True)
            rows.append({"shape": {"layers": layers, "hidden": hidden, "heads": heads, "batch": batch, "seq": seq},
                         "variant": label, "ms": times[label], "speedup_vs_torch": times["torch"] / times[label]})
    return rows


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small shapes and few repeats")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default=None,
                        help="default: float32 on CPU, bfloat16 on CUDA")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow first compile)")
    parser.add_argument("--skip-model", action="store_true")
    parser.add_argument("--skip-attention", action="store_true")
    parser.add_argument("--json", default=None, help="also write every row to this file (benchmarks/gpu_check.py)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    # As the trainer does (bloomtrain.train): without it, fp32 steps that make denormals run several times
    # slower on x86 CPUs, and which side makes more of them decides the ratio.
    torch.set_flush_denormal(True)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    dtype = getattr(torch, args.dtype or ("bfloat16" if device == "cuda" else "float32"))
    kinds = ["torch", "fused"] + ([] if args.no_compile else ["compile"])
    if device == "cuda":
        try:
            import apex  # noqa: F401, PLC0415

            kinds.append("apex")
        except ImportError:
            print("apex not installed: no apex column")
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, kinds {kinds}")
    warmup, iters = (2, 5) if args.quick else (5, 20)
    copy = copy_gbps(device, warmup, iters)
    print(f"device-to-device copy: {copy:,.0f} GB/s (read + written): the bandwidth an elementwise op can reach")
    rows = {"device": device, "dtype": str(dtype).removeprefix("torch."), "kinds": kinds, "copy_gbps": copy,
            "kernels": bench_kernels(device, args.quick, kinds, dtype, copy)}
    if not args.skip_attention:
        rows["attention"] = bench_attention(device, args.quick, dtype)
    if not args.skip_model:
        rows["model"] = bench_model(device, args.quick, kinds, dtype)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
