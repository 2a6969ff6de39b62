"""Shared fixtures for bloomdata tests: the repository's test corpus and one small BLOOM-style tokenizer per run.

The corpus is tests/data/corpus (27 languages x 160 documents, {"text","lang"} per line; CC BY, see its
README): inside the repository, so these tests never skip for want of it.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bloomdata.build import run_build
from tests.bloomdata.build_helpers import BIG_ROWS, BIG_SHARD_ROWS, LANGS, _config, _outputs
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


# --- the build tests' shared inputs (tests/bloomdata/test_build*.py) ---------------------------------------


@pytest.fixture(scope="module")
def client():
    from bloomdata.jobs.executor import dask_client

    with dask_client(2) as c:  # the build's own cluster setup (and its environment restore on exit)
        yield c


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory, corpus_dir) -> Path:
    """Four languages of the test corpus (160, 160, 146, 160 documents)."""
    out = tmp_path_factory.mktemp("corpus")
    for lang in LANGS:
        (out / f"{lang}.jsonl").write_bytes((corpus_dir / f"{lang}.jsonl").read_bytes())
    return out


@pytest.fixture(scope="module")
def big_jsonl(tmp_path_factory, corpus_dir) -> Path:
    """~3 MB, 2,400 documents of mixed languages (repeated and shuffled): shards that take long enough
    (~0.2-0.5 s each) to be interrupted."""
    rows = [line for lang in LANGS for line in (corpus_dir / f"{lang}.jsonl").read_text().splitlines()]
    rows = rows * 4
    random.Random(0).shuffle(rows)
    assert len(rows) == BIG_ROWS
    path = tmp_path_factory.mktemp("big") / "mixed.jsonl"
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def reference_big(tmp_path_factory, big_jsonl, small_tokenizer_dir) -> dict[str, bytes]:
    """The big file built in-process (no Dask): what every interrupted build must reproduce."""
    out = tmp_path_factory.mktemp("ref_big")
    run_build(_config([big_jsonl], small_tokenizer_dir, out, append_eod=True, workers=0,
                      max_rows_per_shard=BIG_SHARD_ROWS))
    return _outputs(out)
