"""megatron-core 0.16.1 as a test oracle: tiny datasets, a stub tokenizer, and GPTDataset / blend builders.

Imported by the bloomdata index tests only (megatron-core imports torch, which bloomdata itself never does).
Splits given to megatron must all hold tokens: its GPTDataset loops forever on an empty one.
"""

from __future__ import annotations

import logging
import warnings

import numpy as np

from bloomdata.megatron.indexed import IndexedDatasetWriter

warnings.filterwarnings("ignore", message=".*Transformer Engine.*")
logging.getLogger("megatron").setLevel(logging.ERROR)


class StubTokenizer:
    """What GPTDatasetConfig reads from a tokenizer: vocab size, eod/pad ids and a cache identity."""

    vocab_size = 1000
    eod = 0
    pad = 1
    unique_identifiers = {"class": "StubTokenizer"}


def write_dataset(prefix, num_docs: int, seed: int = 0, max_len: int = 80, dtype=np.uint16, empty_every: int = 0):
    """Random documents of 1..max_len tokens (every ``empty_every``-th one empty when > 0).

    Our writer skips empty documents (as BigScience's tools do), so datasets with zero-length sequences
    are written with megatron-core's IndexedDatasetBuilder.
    """
    rng = np.random.default_rng(seed)
    if empty_every:
        import torch
        from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

        builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
        for i in range(num_docs):
            n = 0 if i % empty_every == 0 else int(rng.integers(1, max_len))
            builder.add_item(torch.from_numpy(rng.integers(2, 1000, size=n)))
            builder.end_document()
        builder.finalize(f"{prefix}.idx")
        return str(prefix)
    with IndexedDatasetWriter(prefix, dtype) as writer:
        for _ in range(num_docs):
            n = int(rng.integers(1, max_len))
            writer.add_document(rng.integers(2, 1000, size=n))
    return str(prefix)


def gpt_config(seed: int, seq_length: int, **kwargs):
    from megatron.core.datasets.gpt_dataset import GPTDatasetConfig

    return GPTDatasetConfig(
        random_seed=seed, sequence_length=seq_length, tokenizer=StubTokenizer(), reset_position_ids=False,
        reset_attention_mask=False, eod_mask_loss=False, path_to_cache=None, **kwargs,
    )


def gpt_dataset(prefix: str, begin: int, end: int, num_samples, seed: int, seq_length: int, split: str = "train"):
    """megatron-core's GPTDataset over sequences [begin, end) of ``prefix``."""
    from megatron.core.datasets.gpt_dataset import GPTDataset
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from megatron.core.datasets.utils import Split

    config = gpt_config(seed, seq_length, split="1")
    indices = np.arange(begin, end, dtype=np.int32)
    return GPTDataset(IndexedDataset(prefix), prefix, indices, num_samples, Split[split], config)


def blended_build(prefixes, weights, sizes, seed: int, seq_length: int, split: str):
    """megatron-core's BlendedMegatronDatasetBuilder(...).build(): [train, valid, test] BlendedDatasets."""
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset

    config = gpt_config(seed, seq_length, blend=(list(prefixes), list(weights)), split=split)
    return BlendedMegatronDatasetBuilder(GPTDataset, list(sizes), lambda: True, config).build()


def megatron_tokens(dataset, i: int) -> np.ndarray:
    """The seq_length + 1 tokens megatron-core serves as sample i."""
    return dataset._query_document_sample_shuffle_indices(i)[0]
