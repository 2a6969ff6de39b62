"""Fixtures for the model, TP, export and generate tests: tiny random transformers BLOOMs and a tokenizer.

Nothing is downloaded: ``BloomForCausalLM(config)`` is randomly initialised, then LayerNorms and biases
are perturbed too (HF initialises them to 1/0, which would hide a swapped weight/bias or a missing bias).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.data import CORPUS_DIR


def build_hf_bloom(n_head: int = 12, n_layer: int = 2, hidden: int = 96, vocab: int = 256, seed: int = 0):
    from transformers import BloomConfig, BloomForCausalLM  # noqa: PLC0415

    torch.manual_seed(seed)
    config = BloomConfig(vocab_size=vocab, hidden_size=hidden, n_layer=n_layer, n_head=n_head,
                         bos_token_id=1, eos_token_id=2, pad_token_id=3)
    model = BloomForCausalLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "layernorm" in name or "ln_f" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.fixture
def hf_bloom():
    """Factory: ``hf_bloom(n_head=12, n_layer=2, hidden=96, vocab=256, seed=0)`` -> BloomForCausalLM (eval)."""
    return build_hf_bloom


def write_tiny_tokenizer(out_dir: Path, vocab_size: int = 250) -> None:
    """A byte-level BPE tokenizer trained on a few corpus lines, saved as tokenizer.json + tokenizer_config."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415

    texts = ["the quick brown fox jumps over the lazy dog", "hello world, hello bloom",
             "une phrase en français", "el zorro marrón rápido"] * 4
    for path in sorted(CORPUS_DIR.glob("*.jsonl"))[:3]:
        with path.open() as f:
            texts += [json.loads(line)["text"][:500] for _, line in zip(range(20), f)]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "BloomTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>",
        "eos_token": "</s>", "pad_token": "<pad>", "padding_side": "left",
    }))


@pytest.fixture
def tiny_tokenizer_dir(tmp_path):
    out = tmp_path / "tokenizer"
    write_tiny_tokenizer(out)
    return out


@pytest.fixture
def tr11_dir(tmp_path) -> Path:
    """A workdir holding the inputs tr11's config names (its blend, one dataset), so that the job can be written."""
    data = tmp_path / "data" / "tr11"
    data.mkdir(parents=True)
    (data / "blend.yaml").write_text("seq_length: 2048\ntrain_range: '0:0.95'\nvalid_range: '0.95:1.0'\ndatasets:\n"
                                     "- {name: en, prefix: data/tr11/en, weight: 1.0}\n")
    for suffix in (".bin", ".idx"):
        (data / f"en{suffix}").touch()
    return tmp_path
