"""GPT training samples over an IndexedDataset: megatron's three indices, rebuilt exactly and faster.

A GPT "sample" is ``seq_length + 1`` consecutive tokens of the concatenation of shuffled documents
(consecutive samples share one token). Three arrays define the order (docs/megatron-data.md, "Sample index"):

- ``document_index`` int32[E * D]: the split's sequence ids repeated for E epochs and shuffled;
- ``sample_index`` [n + 1, 2]: per sample boundary, (position in document_index, token offset);
- ``shuffle_index`` uint32/int64[n]: the order in which samples are served.

``compat`` picks the algorithm. ``Compat.CORE`` equals megatron-core 0.16.1's ``GPTDataset`` (last-epoch
cutoff 0.80; sample_index int32 unless ``max(len(document_index), sizes.max())`` exceeds int32, then
int64). ``Compat.BLOOM`` is the BigScience Megatron-DeepSpeed code that trained BLOOM (cutoff 0.95; int32
sample_index always, refused instead of silently overflowing as it did there). Both use one
``RandomState(seed)`` stream, in the order: document shuffle(s), then sample shuffle(s).

Differences from megatron, on purpose: a split with no documents or no tokens raises ``BloomstackError``
(megatron-core loops forever there); the cache is keyed by everything that determines the arrays and is
written atomically (``bloomdata.megatron.index_cache``); ``s[i]`` returns the int64 tokens only.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bloomdata.errors import BloomstackError
from bloomdata.megatron import index_builders
from bloomdata.megatron.index_cache import IndexCache
from bloomdata.megatron.indexed import IndexedDataset, index_file_path
from bloomdata.megatron.splits import Compat, Split, check_compat, check_split, split_range

LAST_EPOCH_CUTOFF = {Compat.CORE: 0.80, Compat.BLOOM: 0.95}
ARRAY_NAMES = ["document_index", "sample_index", "shuffle_index"]


@dataclass(frozen=True)
class EpochPlan:
    """How many epochs a request needs and whether the last one is shuffled on its own."""

    tokens_per_epoch: int
    num_epochs: int
    separate_final_epoch: bool
    num_samples_sans_final_epoch: int  # samples covered by the first E-1 epochs (when separate)
    total_samples: int  # rows of sample_index minus one: every full sample of the E epochs


@dataclass(frozen=True)
class SampleSettings:
    """How samples are cut from a dataset, alike for every dataset of a blend: megatron-core's
    ``GPTDatasetConfig`` (sequence length, seed, the reference arithmetic) plus where the indices are cached."""

    seq_length: int  # tokens per sample, minus the one shared with the next
    seed: int  # the RandomState(seed) of the document and sample shuffles (megatron-core's random_seed)
    compat: Compat = Compat.CORE  # CORE: megatron-core 0.16.1; BLOOM: BigScience's Megatron-DeepSpeed
    cache_dir: str | os.PathLike | None = None  # load the arrays from / save them to this directory
    tokenizer_id: str | None = None  # any string naming the tokenizer: part of the cache key only
    backend: str | None = None  # "cpp" or "numpy" (tests); None: the C++ helpers when built
    verify_cache: bool = True  # check the digests of cached arrays on load

    def __post_init__(self) -> None:
        object.__setattr__(self, "compat", check_compat(self.compat))
        # plain ints (a numpy integer would key a cache differently): set once, the settings are frozen
        object.__setattr__(self, "seq_length", int(self.seq_length))
        object.__setattr__(self, "seed", int(self.seed))
        if self.seq_length < 1:
            raise BloomstackError(f"seq_length must be >= 1, got {self.seq_length}")
        if not 0 <= self.seed < 2**32:
            raise BloomstackError(f"seed must be in [0, 2**32), got {self.seed}")


def plan_epochs(tokens_per_epoch: int, seq_length: int, num_samples: int | None, compat: Compat) -> EpochPlan:
    """megatron's epoch count (smallest E with E*T >= N*L + 1) and last-epoch separation rule."""
    t, sl = tokens_per_epoch, seq_length
    if num_samples is None:  # one pass (megatron-core's num_samples=None)
        num_epochs = 1
    else:
        num_epochs = max(1, -(-(num_samples * sl + 1) // t))
    separate, sans_final = False, 0
    if num_epochs > 1:
        sans_final = ((num_epochs - 1) * t - 1) // sl
        assert num_samples is not None  # one epoch when None
        from_final = num_samples - sans_final
        per_epoch = (t - 1) // sl
        separate = from_final < int(LAST_EPOCH_CUTOFF[compat] * per_epoch)
    total = (num_epochs * t - 1) // sl
    return EpochPlan(t, num_epochs, separate, sans_final, total)


def sample_index_dtype(document_index_len: int, max_size: int, compat: Compat) -> np.dtype:
    if compat == Compat.BLOOM:
        return np.dtype(np.int32)
    # megatron-core helpers.build_sample_idx: int32 while both positions and offsets fit.
    return np.dtype(np.int32 if max(document_index_len, max_size) <= index_builders.INT32_MAX else np.int64)


def build_gpt_indices(
    documents: np.ndarray, sizes: np.ndarray, num_samples: int | None, settings: SampleSettings
) -> tuple[dict[str, np.ndarray], EpochPlan, dict[str, float]]:
    """The three arrays for ``documents`` (sequence ids) of a dataset with lengths ``sizes``.

    Returns (arrays, plan, seconds per step). Pure: no files, no dataset object (``settings.cache_dir`` unused).
    """
    seq_length, compat = int(settings.seq_length), settings.compat
    backend = index_builders.resolve_backend(settings.backend)
    tokens = int(np.sum(sizes[documents], dtype=np.int64))
    if tokens == 0:
        raise BloomstackError("no tokens in the requested documents")
    plan = plan_epochs(tokens, seq_length, num_samples, compat)
    if plan.num_epochs * len(documents) > index_builders.INT32_MAX and compat == Compat.BLOOM:
        raise BloomstackError(
            f"{plan.num_epochs} epochs x {len(documents)} documents overflow BLOOM's int32 sample index; "
            "use compat='core' (int64) or fewer samples"
        )
    times = {}
    t0 = time.perf_counter()
    stream = index_builders.RandomStream(int(settings.seed), backend)
    document_index, lengths = index_builders.build_document_index(
        documents, sizes, plan.num_epochs, plan.separate_final_epoch, stream
    )
    t1 = time.perf_counter()
    max_size = int(sizes.max()) if len(sizes) else 0
    dtype = sample_index_dtype(len(document_index), max_size, compat)
    sample_index = index_builders.build_sample_index(lengths, seq_length, plan.total_samples, dtype, backend)
    del lengths
    t2 = time.perf_counter()
    first = plan.num_samples_sans_final_epoch if plan.separate_final_epoch else plan.total_samples
    shuffle_index = index_builders.build_shuffle_index(first, plan.total_samples, stream)
    t3 = time.perf_counter()
    times = {"document_index": t1 - t0, "sample_index": t2 - t1, "shuffle_index": t3 - t2}
    arrays = {"document_index": document_index, "sample_index": sample_index, "shuffle_index": shuffle_index}
    return arrays, plan, times


def _dataset_identity(ds: IndexedDataset) -> dict:
    """What identifies the .idx contents cheaply: path, size, mtime, counts."""
    path = index_file_path(ds.prefix)
    st = os.stat(path)
    return {
        "idx": os.path.realpath(path),
        "idx_bytes": st.st_size,
        "idx_mtime_ns": st.st_mtime_ns,
        "sequences": len(ds),
        "dtype": ds.dtype.name,
    }


class GPTSamples:
    """Samples of ``seq_length + 1`` tokens over one split of an IndexedDataset.

    ``split`` is None (all sequences), ``(begin, end)``, ``"START:END"`` fractions or a ``"949,50,1"``
    vector (see ``bloomdata.megatron.splits``); ``split_name`` picks train/valid/test; ``settings`` holds the
    sequence length, seed, reference arithmetic and cache (``SampleSettings``). ``num_samples`` None: one epoch.
    """

    def __init__(self, dataset: IndexedDataset | str | os.PathLike, num_samples: int | None,
                 settings: SampleSettings, split: str | tuple[int, int] | None = None, split_name: Split = Split.TRAIN):
        split_name = check_split(split_name)
        if not isinstance(dataset, IndexedDataset):
            dataset = IndexedDataset(dataset)
        if num_samples is not None and int(num_samples) < 0:
            raise BloomstackError(f"num_samples must be >= 0 or None, got {num_samples}")
        self.dataset, self.settings = dataset, settings
        self.num_samples = None if num_samples is None else int(num_samples)
        self.split, self.split_name = split, split_name
        self.document_range = split_range(split, split_name, len(dataset), settings.compat)
        self.plan = plan_epochs(self._tokens(), settings.seq_length, self.num_samples, settings.compat)
        self.build_seconds: dict[str, float] = {}
        if settings.cache_dir is None:
            arrays, self.built = self._build(), True
            self.cache = None
        else:
            self.cache = IndexCache(settings.cache_dir, "GPTSamples", split_name, self._description())
            arrays, self.built = self.cache.load_or_build(ARRAY_NAMES, self._build, verify=settings.verify_cache)
        self.document_index = arrays["document_index"]
        self.sample_index = arrays["sample_index"]
        self.shuffle_index = arrays["shuffle_index"]

    def _tokens(self) -> int:
        """The split's tokens; a split without documents, tokens or one whole sample is an error."""
        begin, end = self.document_range
        where = f"{self.dataset.prefix} split {self.split_name!r} ({self.split!r} -> sequences [{begin}, {end}))"
        if end <= begin:
            raise BloomstackError(f"{where} holds no documents; change the split or use more data")
        tokens = int(self.dataset.sizes[begin:end].sum(dtype=np.int64))
        if tokens == 0:
            raise BloomstackError(f"{where} holds no tokens (all its documents are empty)")
        if self.num_samples is None and tokens - 1 < self.settings.seq_length:
            raise BloomstackError(f"{where} holds {tokens} tokens, "
                                  f"fewer than one sample of {self.settings.seq_length + 1}")
        return tokens

    def _build(self) -> dict[str, np.ndarray]:
        documents = np.arange(*self.document_range, dtype=np.int32)
        arrays, _, self.build_seconds = build_gpt_indices(
            documents, np.asarray(self.dataset.sizes), self.num_samples, self.settings)
        return arrays

    def _description(self) -> dict[str, Any]:
        """Everything that determines the arrays: the cache key."""
        split = self.split
        return {
            "dataset": _dataset_identity(self.dataset),
            "document_range": list(self.document_range),
            "split": list(split) if isinstance(split, tuple | list) else split,
            "split_name": self.split_name,
            "compat": self.settings.compat,
            "tokenizer": self.settings.tokenizer_id,
            "seed": self.settings.seed,
            "seq_length": self.settings.seq_length,
            "num_samples": self.num_samples,
            "plan": asdict(self.plan),
        }

    @property
    def prefix(self) -> str:
        return self.dataset.prefix

    def __len__(self) -> int:
        return self.sample_index.shape[0] - 1

    def __getitem__(self, i: int) -> np.ndarray:
        """Tokens of sample ``i`` (int64[seq_length + 1]), served in shuffled order."""
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample {i} out of range for {n} samples")
        j = int(self.shuffle_index[i])
        first, first_offset = (int(x) for x in self.sample_index[j])
        last, last_offset = (int(x) for x in self.sample_index[j + 1])
        doc = self.document_index
        if first == last:
            return self.dataset.get(int(doc[first]), first_offset, last_offset - first_offset + 1).astype(np.int64)
        parts = [self.dataset.get(int(doc[first]), first_offset)]
        parts += [self.dataset.get(int(doc[k])) for k in range(first + 1, last)]
        parts.append(self.dataset.get(int(doc[last]), 0, last_offset + 1))
        return np.concatenate(parts, dtype=np.int64)

    def __repr__(self) -> str:
        return (
            f"GPTSamples({self.prefix!r}, split={self.split_name}:{self.document_range}, "
            f"seq_length={self.settings.seq_length}, samples={len(self)}, epochs={self.plan.num_epochs}, "
            f"compat={self.settings.compat})"
        )
