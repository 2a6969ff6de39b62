"""Shared fixtures for bloomdata tests: the shared corpus and one small BLOOM-style tokenizer per run.

The corpus is ../shared/corpus beside the repository (27 languages x 160 documents, {"text","lang"} per
line), or $BLOOMSTACK_SHARED_CORPUS. Tests that need it skip with a clear reason when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

CORPUS_ENV = "BLOOMSTACK_SHARED_CORPUS"
SMALL_VOCAB = 3000  # big enough for real merges in every script, small enough to train in ~2 s
SMALL_BUDGET = 1_000_000  # bytes of training text (~37 KB per language)


def find_corpus() -> Path | None:
    candidates = [Path(__file__).resolve().parents[2].parent / "shared" / "corpus"]
    if os.environ.get(CORPUS_ENV):
        candidates.append(Path(os.environ[CORPUS_ENV]))
    for path in candidates:
        if path.is_dir() and any(path.glob("*.jsonl")):
            return path
    return None


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    """The shared multilingual corpus directory (skips the test when absent)."""
    path = find_corpus()
    if path is None:
        pytest.skip(f"shared corpus not found: expected ../shared/corpus beside the repo or ${CORPUS_ENV}")
    return path


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
