"""The anchor of ``bench_mfu --anchor``: a plain PyTorch GPT of a BLOOM shape, trained the way a careful
engineer writes it by hand, timed in the same process as bloomtrain's step.

Same shape and work as the BLOOM recipe: layers x hidden, heads, sequence, the padded vocabulary, the embedding
LayerNorm, a tied head, tanh GeLU, 4h MLP, dropout as the recipe (hidden and attention), AdamW with the recipe's
betas, eps, weight decay and clipping, the same micro-batch and gradient accumulation. What makes it fast: only
stock PyTorch. nn.Linear / nn.LayerNorm; SDPA causal attention (the flash kernel on a GPU, its dropout inside);
no ALiBi (flash takes no bias: the anchor is the speed of the plain model BLOOM's attention has to match); each
block ``torch.compile``'d; AdamW ``fused=True``; bf16 autocast over fp32 weights (``precision="bf16"``). The
figures use bloomtrain's model FLOP count (bloomtrain.metrics.flops_per_iteration without recomputation), so
both MFUs compare.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class AnchorShape:
    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    hidden_dropout: float
    attention_dropout: float
    init_std: float


@dataclass(frozen=True)
class AnchorRun:
    micro_batch: int
    global_batch: int
    iters: int
    warmup: int
    precision: str  # "bf16" (autocast) or "fp32"
    lr: float = 3e-4
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 0.1
    clip_grad: float = 1.0
    compile_blocks: bool = True
    """Each block ``torch.compile``'d (what the anchor is on a GPU; bench_mfu leaves it off on a CPU by default)."""
    profiled: int = 0
    """Steps run under torch.profiler after the timed ones (bench_mfu --profile): their summary is ``profile``."""


class Block(nn.Module):
    def __init__(self, s: AnchorShape) -> None:
        super().__init__()
        h = s.hidden
        self.heads, self.p, self.p_attn = s.heads, s.hidden_dropout, s.attention_dropout
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.out = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p_attn if self.training else 0.0,
                                              is_causal=True)  # [b, heads, s, hd]
        x = x + F.dropout(self.proj(attn.transpose(1, 2).reshape(b, s, h)), self.p, self.training)
        mlp = self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x + F.dropout(mlp, self.p, self.training)


class AnchorGPT(nn.Module):
    def __init__(self, s: AnchorShape) -> None:
        super().__init__()
        self.p = s.hidden_dropout
        self.embedding = nn.Embedding(s.vocab, s.hidden)
        self.embedding_norm, self.final_norm = nn.LayerNorm(s.hidden), nn.LayerNorm(s.hidden)
        self.blocks = nn.ModuleList(Block(s) for _ in range(s.layers))
        for name, param in self.named_parameters():
            if param.dim() == 2:
                nn.init.normal_(param, std=s.init_std)
            elif name.endswith("bias"):
                nn.init.zeros_(param)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = F.dropout(self.embedding_norm(self.embedding(ids)), self.p, self.training)
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.final_norm(x), self.embedding.weight)  # the tied head
        return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten())


def _optimizer(model: nn.Module, run: AnchorRun) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": run.weight_decay}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=run.lr, betas=run.betas, eps=run.eps, fused=True)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_anchor(shape: AnchorShape, run: AnchorRun, device: torch.device) -> dict:
    """Step times of ``run.iters`` optimizer steps after ``run.warmup``; the median's tokens/s and the peak
    device memory (CUDA; process RSS is not the anchor's alone, so None elsewhere)."""
    torch.manual_seed(0)
    model = AnchorGPT(shape).to(device).train()
    if run.compile_blocks:
        for block in model.blocks:
            block.compile()
    optimizer = _optimizer(model, run)
    accumulation = run.global_batch // run.micro_batch
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, shape.vocab, (accumulation, run.micro_batch, shape.seq + 1), generator=g).to(device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if run.precision == "bf16" else nullcontext()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)

    def train_step() -> float:
        _sync(device)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for micro in tokens:
            with autocast:
                loss = model(micro[:, :-1], micro[:, 1:]) / accumulation
            loss.backward()
            total += loss.detach()
        torch.nn.utils.clip_grad_norm_(model.parameters(), run.clip_grad, foreach=device.type == "cuda")
        optimizer.step()
        float(total)  # the loss read of a training loop; waits for the step, like bloomtrain's
        return time.perf_counter() - start

    times = [train_step() for _ in range(run.warmup + run.iters)][run.warmup:]
    step = statistics.median(times)
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    out = {"step_time_s": step, "tokens_per_s": run.global_batch * shape.seq / step, "memory_gib": memory,
           "timed_iterations": len(times), "compiled_blocks": run.compile_blocks, "precision": run.precision}
    if run.profiled:
        first = run.warmup + run.iters + 1
        out["profile"] = profile_steps(train_step, (first, first + run.profiled - 1), device).model_dump(mode="json")
    return out


def profile_steps(train_step: Callable[[], float], iterations: tuple[int, int], device: torch.device):
    """Run ``train_step`` for ``iterations`` under torch.profiler; the summary bloomtrain's ProfileCallback writes
    (bloomtrain.callbacks.profile.summarize: the same rows and groups, so the two read side by side)."""
    from bloomtrain.callbacks.profile import profiler_for, summarize

    on_cuda = device.type == "cuda"
    with profiler_for(on_cuda) as prof:
        wall_s = sum(train_step() for _ in range(iterations[1] - iterations[0] + 1))
        _sync(device)
    return summarize(prof.key_averages(), 0, iterations, on_cuda, wall_s)
