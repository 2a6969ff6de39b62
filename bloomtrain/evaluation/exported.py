"""Checks of an exported transformers directory: its loss on a blend's validation samples, and greedy samples.

Both run *transformers* (``BloomForCausalLM.from_pretrained``) on the exported directory, not our model code:
they prove the export loads and runs where users will load it. ``blend_loss`` reads the trainer's own
validation samples in the same order (``bloomdata.megatron.builder.DataSplits``, the trainer's builder, from the
same ``SplitsConfig``), scored by ``score_sequences``
(every sample of seq_length + 1 tokens predicts its last seq_length, as in training), so in fp32 the loss
agrees closely with the trainer's last validation loss: a check that the export is the trained model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from pydantic import BaseModel
from tokenizers import Tokenizer

from bloomdata.errors import BloomstackError
from bloomdata.megatron.builder import DataSplits, SplitsConfig
from bloomdata.megatron.splits import Split
from bloomtrain.evaluation.scoring import Scorer, score_sequences
from bloomtrain.measures import perplexity


class BlendLoss(BaseModel):
    """Mean next-token loss (nats) of a model on the first ``samples`` samples of a blend's split."""

    loss: float
    ppl: float
    samples: int


def blend_loss(hf_dir: str, data: SplitsConfig, n_samples: int, split: Split = Split.VALID) -> BlendLoss:
    """The exported model's loss on the first ``n_samples`` ``split`` samples of the trainer's data (``data``: what
    the trainer built its splits from; the same builder, so the same samples in the same order)."""
    from transformers import BloomForCausalLM  # noqa: PLC0415 - transformers only when scoring

    samples = DataSplits(data).split(split, n_samples)
    if samples is None:
        raise BloomstackError(f"{data.blend}: no {split} documents to score the export on; give the blend a split "
                              "with a validation part")
    model = BloomForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    nll, tokens = score_sequences(Scorer(model), np.stack([samples[i] for i in range(n_samples)]))
    loss = float(nll.sum() / tokens.sum())  # every sample scores seq_length tokens: the mean of sample means
    return BlendLoss(loss=loss, ppl=perplexity(loss), samples=n_samples)


def greedy_samples(hf_dir: str, prompts: list[str], max_new_tokens: int, seed: int = 0) -> list[str]:
    """Greedy continuations of ``prompts`` by the exported model, with the tokenizer.json in its directory."""
    from transformers import BloomForCausalLM  # noqa: PLC0415

    torch.manual_seed(seed)
    tokenizer = Tokenizer.from_file(str(Path(hf_dir) / "tokenizer.json"))
    model = BloomForCausalLM.from_pretrained(hf_dir).eval()
    vocab = tokenizer.get_vocab_size()
    out = []
    for prompt in prompts:
        ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False).ids])
        with torch.no_grad():
            # Padded vocabulary rows are never real tokens: keep them out of the argmax.
            bad = [[i] for i in range(vocab, model.config.vocab_size)] or None
            gen = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, bad_words_ids=bad,
                                 eos_token_id=tokenizer.token_to_id("</s>"),
                                 pad_token_id=tokenizer.token_to_id("<pad>"))
        out.append(prompt + tokenizer.decode(gen[0, ids.shape[1]:].tolist()))
    return out
