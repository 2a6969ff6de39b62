"""``bloomtrain generate``: greedy or top-k / top-p sampling from a checkpoint or an exported model.

``--model`` is either our checkpoint directory (holds ``latest``; TP shards are merged) or a
transformers BLOOM directory (``config.json`` + safetensors). The model runs unsharded in one process
with a KV cache (one forward over the prompt, then one token per step). The tokenizer is read with the
``tokenizers`` library from ``tokenizer.json`` in the model directory (or ``--tokenizer``). Sampling
never picks the padded vocabulary rows beyond the tokenizer's size.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from bloomdata.errors import BloomstackError
from bloomtrain.checkpoint import format as fmt
from bloomtrain.hf_import import read_hf_dir
from bloomtrain.model.bloom import BloomModel


def load_model(path: Path, dtype: torch.dtype = torch.float32) -> BloomModel:
    """An unsharded eval-mode ``BloomModel`` from a checkpoint dir or a transformers BLOOM dir."""
    path = Path(path)
    if (path / "latest").is_file():
        config, merged = fmt.load_merged_states(path)
    elif (path / "config.json").is_file():
        config, merged = read_hf_dir(path)
    else:
        raise BloomstackError(f"{path}: neither a checkpoint (no `latest`) nor a transformers model (no config.json)")
    model = BloomModel(config, device="meta")  # no random init: the weights are adopted below
    merged = {i: {k: v.to(dtype) for k, v in sd.items()} for i, sd in merged.items()}
    fmt.load_model_layer_states(model, merged, assign=True)
    return model.eval()


def _filter_logits(logits: torch.Tensor, top_k: int | None, top_p: float | None) -> torch.Tensor:
    """Set logits outside the top-k and outside the top-p nucleus to -inf. logits: [b, V] fp32."""
    if top_k is not None and 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # Drop a token when the tokens ranked above it already hold >= top_p of the mass (top-1 always kept).
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@dataclass(frozen=True)
class Sampling:
    """How ``generate`` picks each next token (transformers' GenerationConfig, the part we use)."""

    max_new_tokens: int = 32
    greedy: bool = False  # argmax; else a draw from the filtered, tempered distribution
    temperature: float = 1.0
    top_k: int | None = None  # keep the k most likely tokens
    top_p: float | None = None  # keep the most likely tokens holding this much probability
    eos_token_id: int | None = None  # a row that produced it keeps emitting it; all rows done: stop
    vocab_limit: int | None = None  # embedding rows past the tokenizer's vocabulary are never drawn


@torch.no_grad()
def generate(model: BloomModel, input_ids: torch.Tensor, sampling: Sampling | None = None, *,
             attention_mask: torch.Tensor | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """Extend ``input_ids`` ``[b, s]`` (left-padded when ``attention_mask`` has zeros) -> ``[b, s + n]``.

    Rows that produced ``sampling.eos_token_id`` keep emitting it; stops early when every row has.
    """
    s = sampling or Sampling()
    eos_token_id = s.eos_token_id
    if model.state.tp_size != 1:
        raise ValueError("generate runs an unsharded model (tp_size 1)")
    cache = model.new_cache()
    tokens, step_input = input_ids, input_ids
    mask = attention_mask
    done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
    for _ in range(s.max_new_tokens):
        logits = model(step_input, mask, cache=cache)[:, -1].float()  # [b, V]
        if s.vocab_limit is not None:
            logits[:, s.vocab_limit:] = float("-inf")
        if s.greedy:
            next_ids = logits.argmax(dim=-1)
        else:
            logits = _filter_logits(logits / max(s.temperature, 1e-6), s.top_k, s.top_p)
            next_ids = torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(-1)
        if eos_token_id is not None:
            next_ids = next_ids.masked_fill(done, eos_token_id)
            done |= next_ids == eos_token_id
        tokens = torch.cat([tokens, next_ids[:, None]], dim=1)
        step_input = next_ids[:, None]
        if mask is not None:
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        if eos_token_id is not None and bool(done.all()):
            break
    return tokens

