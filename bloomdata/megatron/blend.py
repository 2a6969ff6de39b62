"""Blends of several GPTSamples: megatron's greedy blend index and its per-dataset sample counts.

The samples of a blend (megatron's BlendedDataset); its weights are chosen, and its YAML written, by
``bloomdata.blend`` (see that package for what "blend" and "mixture" name).

Sample k of a blend comes from dataset ``argmax_i(w_i * max(k, 1) - c_i)`` (ties to the lowest i), where
``c_i`` counts what dataset i has given so far; ``dataset_sample_index[k] = c_i`` is the sample taken from
it. No randomness: each component's own shuffle index randomises its samples (docs/megatron-data.md,
"Blend"). The two compat modes differ in the bookkeeping around that rule:

======================  ===========================================  ==========================================
                        ``Compat.CORE`` (megatron-core 0.16.1)        ``Compat.BLOOM`` (Megatron-DeepSpeed)
======================  ===========================================  ==========================================
weights                 ``w / np.sum(w)`` in the builder and again   ``w / sum(w)`` (Python) in the builder,
                        in BlendedDataset                            ``w / np.sum(w)`` in BlendableDataset
samples per dataset     ``ceil(ceil(N * w) * (1 + 0.005))``          ``ceil(N * w * 1.005)``
blend length            ``sum(ceil(N * w))``                         sum of the components' full lengths
dataset_index dtype     int16 (< 32767 datasets)                     uint8 (< 255 datasets)
oversampling check      yes (raises)                                 none (BLOOM stopped at N before it bit)
======================  ===========================================  ==========================================

Both are reproduced exactly because the counts feed each component's epochs and shuffles.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from bloomdata.errors import BloomstackError
from bloomdata.megatron import index_builders
from bloomdata.megatron.gpt_samples import GPTSamples, SampleSettings
from bloomdata.megatron.index_cache import IndexCache
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.megatron.splits import Compat, Split, WeightedSplit, check_compat, parse_weighted_split

SURPLUS = 0.005  # megatron-core's mid_level_dataset_surplus default and BigScience's hard-coded 1.005
INDEX_DTYPE: dict[Compat, np.dtype[Any]] = {Compat.CORE: np.dtype(np.int16), Compat.BLOOM: np.dtype(np.uint8)}
MAX_DATASETS = {Compat.CORE: 32767, Compat.BLOOM: 255}  # exclusive limits asserted by BlendedDataset / BlendableDataset


def check_weights(weights: Sequence[float], names: Sequence[str] | None = None) -> list[float]:
    """Weights as floats; negative, NaN, infinite, zero or empty weights raise, naming the dataset."""
    names = list(names) if names is not None else [f"dataset {i}" for i in range(len(weights))]
    if len(weights) == 0:
        raise BloomstackError("a blend needs at least one dataset and weight")
    out = []
    for name, w in zip(names, weights):
        try:
            value = float(w)
        except (TypeError, ValueError):
            raise BloomstackError(f"blend weight {w!r} of {name} is not a number") from None
        if not math.isfinite(value) or value < 0:
            raise BloomstackError(f"blend weight {w!r} of {name} must be a finite number >= 0")
        out.append(value)
    if sum(out) <= 0:
        raise BloomstackError(f"blend weights {list(weights)} are all zero; give at least one dataset weight > 0")
    zero = [name for name, v in zip(names, out) if v == 0]
    if zero:
        raise BloomstackError(f"blend weight of {', '.join(zero)} is 0: drop the dataset from the blend instead")
    return out


def normalize(weights: Sequence[float], how: str = "numpy") -> list[float]:
    """``how="numpy"``: megatron's ``w / np.sum(w)``; ``"python"``: BigScience's ``w / sum(w)``."""
    if how == "python":
        total = sum(weights)
        return [w / total for w in weights]
    w = np.array(weights, dtype=np.float64)
    return (w / np.sum(w)).tolist()


def samples_per_dataset(
    weights: Sequence[float], num_samples: int, compat: Compat = Compat.CORE, surplus: float = SURPLUS
) -> tuple[list[int], list[int]]:
    """(targets, to_build): samples the blend draws from each dataset, and samples built for each.

    ``weights`` are raw; they are normalised as the compat mode's builder does.
    """
    compat = check_compat(compat)
    weights = check_weights(weights)
    if compat == Compat.CORE:
        w = normalize(weights, "numpy")
        targets = [int(math.ceil(num_samples * x)) for x in w]
        return targets, [int(math.ceil(math.ceil(num_samples * x) * (1 + surplus))) for x in w]
    w = normalize(weights, "python")
    targets = [int(math.ceil(num_samples * x)) for x in w]
    # BigScience evaluates (N * w) * 1.005; 1 + 0.005 is the same double as 1.005.
    return targets, [int(math.ceil(num_samples * x * (1 + surplus))) for x in w]


def _component_identity(s: GPTSamples) -> dict:
    if s.cache is not None:
        return {"cache_key": s.cache.key}
    return {
        "prefix": os.path.realpath(s.prefix),
        "document_range": list(s.document_range),
        "seq_length": s.settings.seq_length,
        "num_samples": s.num_samples,
        "seed": s.settings.seed,
        "compat": s.settings.compat,
    }


class Blend:
    """``size`` samples drawn from ``samples`` in proportion to ``weights`` (exactly as megatron does).

    ``b[i]`` is the token array of blended sample i; ``b.locate(i)`` is its (dataset, sample) pair.
    ``size=None`` is only allowed with ``Compat.BLOOM``: the blend length is then the sum of the
    components' lengths, as in BLOOM's BlendableDataset.
    """

    def __init__(
        self,
        samples: Sequence[GPTSamples],
        weights: Sequence[float],
        size: int | None = None,
        compat: Compat = Compat.CORE,
        *,
        cache_dir: str | os.PathLike | None = None,
        backend: str | None = None,
    ):
        compat = check_compat(compat)
        samples = list(samples)
        if len(samples) != len(weights):
            raise BloomstackError(f"{len(samples)} datasets but {len(weights)} weights; give one weight per dataset")
        names = [s.prefix for s in samples]
        weights = check_weights(weights, names)
        check_same_dtype([s.dataset for s in samples])
        index_dtype = INDEX_DTYPE[compat]
        if len(samples) >= MAX_DATASETS[compat]:
            raise BloomstackError(f"{len(samples)} datasets exceed the {compat} blend index ({index_dtype.name})")
        if size is None:
            if compat == Compat.CORE:
                raise BloomstackError("a core blend needs its size (megatron-core: sum of ceil(N * w_i))")
            size = sum(len(s) for s in samples)
        if int(size) < 0:
            raise BloomstackError(f"blend size must be >= 0, got {size}")
        self.samples, self.compat, self.size = samples, compat, int(size)
        self.weights = normalize(weights, "numpy")  # BlendedDataset / BlendableDataset normalise again
        backend = self._backend = index_builders.resolve_backend(backend)

        def build() -> dict[str, np.ndarray]:
            index, sample_index = index_builders.build_blending_indices(self.weights, self.size, index_dtype, backend)
            return {"dataset_index": index, "dataset_sample_index": sample_index}

        names_ = ["dataset_index", "dataset_sample_index"]
        if cache_dir is None:
            arrays, self.built = build(), True
        else:
            description = {
                "components": [_component_identity(s) for s in samples],
                "weights": self.weights,
                "size": self.size,
                "compat": compat,
            }
            split_name = samples[0].split_name
            arrays, self.built = IndexCache(cache_dir, "Blend", split_name, description).load_or_build(names_, build)
        self.dataset_index = arrays["dataset_index"]
        self.dataset_sample_index = arrays["dataset_sample_index"]
        if compat == Compat.CORE:
            self._check_oversampling()

    def _check_oversampling(self) -> None:
        counts = index_builders.count_datasets(self.dataset_index, len(self.samples), self._backend)
        for i, (count, s) in enumerate(zip(counts, self.samples)):
            if count > len(s):
                raise BloomstackError(
                    f"the blend asks {s.prefix} (dataset {i}) for {count} samples but it has {len(s)}: "
                    "build it with more samples (raise the surplus) or lower its weight"
                )

    def __len__(self) -> int:
        return self.size

    def locate(self, i: int) -> tuple[int, int]:
        return int(self.dataset_index[i]), int(self.dataset_sample_index[i])

    def __getitem__(self, i: int) -> np.ndarray:
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError(f"blended sample {i} out of range for {self.size}")
        d, s = self.locate(i)
        return self.samples[d][s]

    def __repr__(self) -> str:
        return f"Blend({len(self.samples)} datasets, size={self.size}, compat={self.compat})"


def greedy_counts(weights: Sequence[float], n: int, backend: str | None = None) -> list[int]:
    """Samples per dataset of an ``n``-sample blend of ``weights`` (raw): the blending rule above, counted."""
    backend = index_builders.resolve_backend(backend)
    index, _ = index_builders.build_blending_indices(normalize(check_weights(weights), "numpy"), n, np.int16, backend)
    return index_builders.count_datasets(index, len(weights), backend).tolist()


def check_same_dtype(datasets: Sequence[IndexedDataset]) -> None:
    dtypes = {ds.dtype for ds in datasets}
    if len(dtypes) > 1:
        detail = ", ".join(f"{ds.prefix}: {ds.dtype.name}" for ds in datasets)
        raise BloomstackError(
            f"blended datasets must share one token dtype, got {detail}; re-tokenize them with one tokenizer"
        )


def build_blend(prefixes: Sequence[str], weights: Sequence[float], num_samples: int, settings: SampleSettings,
                split: str | Sequence[str] | None = None, split_name: Split = Split.TRAIN) -> Blend:
    """Open ``prefixes``, build each component with its builder-computed sample count, and blend them.

    ``split`` is one spec for every prefix (e.g. ``"949,50,1"``) or one per prefix (e.g. ``"0:0.95"``).
    Equal to megatron-core's ``BlendedMegatronDatasetBuilder`` (core) or to Megatron-DeepSpeed's
    ``build_dataset_group`` (bloom) for the same inputs.
    """
    compat = settings.compat
    if len(prefixes) != len(weights):
        raise BloomstackError(f"{len(prefixes)} prefixes but {len(weights)} weights; give one weight per prefix")
    weights = check_weights(weights, list(prefixes))
    splits = [split] * len(prefixes) if split is None or isinstance(split, str) else list(split)
    if len(splits) != len(prefixes):
        raise BloomstackError(f"{len(prefixes)} prefixes but {len(splits)} splits")
    datasets = [IndexedDataset(p) for p in prefixes]
    check_same_dtype(datasets)
    targets, to_build = samples_per_dataset(weights, num_samples, compat)
    components = [GPTSamples(ds, n, settings, sp, split_name) for ds, n, sp in zip(datasets, to_build, splits)]
    cache_dir, backend = settings.cache_dir, settings.backend
    if compat == Compat.CORE:
        return Blend(components, normalize(weights, "numpy"), sum(targets), compat, cache_dir=cache_dir,
                     backend=backend)
    return Blend(components, normalize(weights, "python"), None, compat, cache_dir=cache_dir, backend=backend)


def blend_from_weighted_split(group: str | WeightedSplit, num_samples: int, settings: SampleSettings,
                              split_name: Split | None = None) -> Blend:
    """A blend from BLOOM's ``"train: 0.5 0:0.95 PREFIX_A, 0.5 0:0.95 PREFIX_B"`` syntax (``Compat.BLOOM`` in
    ``settings`` for BLOOM's arithmetic). ``split_name`` None: train/valid/test from the group's name."""
    if isinstance(group, str):
        group = parse_weighted_split(group)
    if split_name is None:
        split_name = next((s for s in Split if group.name.startswith(s)), None)
        if split_name is None:
            raise BloomstackError(
                f"weighted split group {group.name!r}: cannot tell train/valid/test from its name; pass split_name"
            )
    ranges = [f"{e.start}:{e.end}" for e in group.entries]
    return build_blend(group.prefixes, group.weights, num_samples, settings, ranges, split_name)


def blend_from_spec(
    spec,
    num_samples: int,
    split_name: Split = Split.TRAIN,
    cache_dir: str | os.PathLike | None = None,
    compat: Compat = Compat.CORE,
    *,
    seed: int | None = None,
    **kwargs,
) -> Blend:
    """The Blend a ``bloomdata.blend.spec.BlendSpec`` (blend YAML) describes, for ``num_samples``; ``seed``: when
    the YAML names none; ``kwargs``: the other ``SampleSettings`` (tokenizer_id, backend). A run's splits come
    from ``bloomdata.megatron.builder.DataSplits``."""
    if spec.seq_length is None:
        raise BloomstackError("the blend YAML has no seq_length; "
                              "set it (or tune the blend again with its seq_length set)")
    seed = spec.seed if spec.seed is not None else seed
    if seed is None:
        raise BloomstackError("the blend YAML has no seed; set seed in it (or tune the blend again with --seed)")
    settings = SampleSettings(spec.seq_length, seed, compat, cache_dir, **kwargs)
    return build_blend(spec.prefixes, spec.weights, num_samples, settings, spec.split_of(split_name), split_name)
