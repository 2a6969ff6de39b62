"""Shared fixtures for bloomdata tests: the repository's test corpus and one small BLOOM-style tokenizer per run.

The corpus is tests/data/corpus (27 languages x 160 documents, {"text","lang"} per line; CC BY, see its
README): inside the repository, so these tests never skip for want of it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.data import CORPUS_DIR

SMALL_VOCAB = 3000  # big enough for real merges in every script, small enough to train in ~2 s
SMALL_BUDGET = 1_000_000  # bytes of training text (~37 KB per language)


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The multilingual test corpus directory (tests/data/corpus)."""
    assert len(list(CORPUS_DIR.glob("*.jsonl"))) == 27, f"{CORPUS_DIR}: the checkout lacks the test corpus"
    return CORPUS_DIR


@pytest.fixture(scope="session")
def small_tokenizer_dir(tmp_path_factory, corpus_dir) -> Path:
    """A BLOOM-configured tokenizer (vocab 3000) trained on ~1 MB of all 27 corpus languages.

    The directory holds tokenizer.json, tokenizer_config.json, special_tokens_map.json and
    training_report.json, like `bloomdata train-tokenizer` writes.
    """
    from bloomdata.readers import SourceConfig
    from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer

    out = tmp_path_factory.mktemp("small_tokenizer")
    train_tokenizer(TokenizerTrainConfig(
        sources=[SourceConfig(paths=[str(corpus_dir)])], out_dir=str(out), vocab_size=SMALL_VOCAB,
        byte_budget=SMALL_BUDGET, seed=0, show_progress=False,
    ))
    return out
