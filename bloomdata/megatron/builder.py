"""Every split a training run reads, from one config: megatron-core's ``BlendedMegatronDatasetBuilder``.

``DataSplits(config)`` builds from one ``SplitsConfig`` (megatron-core's ``BlendedMegatronDatasetConfig``: the
blend YAMLs, the sequence length, the seed, the reference arithmetic and where indices are cached):

- ``split(name, num_samples)``: the ``train`` or ``valid`` ``Blend`` of ``num_samples`` samples, sized and
  ordered as megatron-core's (or Megatron-DeepSpeed's) builder does; None for ``valid`` when the blend holds no
  validation documents;
- ``fixed_set(source, split, samples)``: the fixed samples of a named validation set (``FixedSamples``): one
  epoch of each dataset's validation split (GPTSamples), ``samples`` of them evenly spaced along it, spread
  over a blend's datasets by Megatron's greedy blending rule (``bloomdata.megatron.blend.greedy_counts``, the
  rule the blends use);
- ``valid_tokens(blend_yaml)``: the validation tokens of each dataset of a blend (which can have a set).

The seed of every document and sample shuffle is the blend YAML's own when it names one (what the blend was
tuned for), else ``SplitsConfig.seed``, which the config must give: no default seed lives in bloomdata. A
blend YAML's ``seq_length``, when it has one, must be the run's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bloomdata.blend.spec import BlendSpec, load_blend_spec
from bloomdata.errors import BloomstackError
from bloomdata.megatron.blend import Blend, build_blend, greedy_counts
from bloomdata.megatron.gpt_samples import GPTSamples, SampleSettings
from bloomdata.megatron.indexed import IndexedDataset, dataset_exists
from bloomdata.megatron.splits import Compat, Split, split_range


@dataclass(frozen=True)
class SplitsConfig:
    """What every split of a run's data is built from."""

    seq_length: int  # tokens per sample, minus the one shared with the next
    seed: int  # the shuffles' seed when a blend YAML names none
    blend: str | None = None  # the blend YAML (bloomdata.blend.spec) of the training split
    valid_blend: str | None = None  # another blend YAML for the validation split (default: ``blend``'s)
    compat: Compat = Compat.CORE  # CORE: megatron-core 0.16.1; BLOOM: BigScience's Megatron-DeepSpeed
    cache_dir: str | None = None  # where sample indices are cached (None: beside each dataset)


@dataclass
class FixedSamples:
    """The fixed samples of one validation set: item k is ``components[which[k]][served[k]]``."""

    name: str
    components: list[GPTSamples]  # one epoch of each dataset's validation split
    which: np.ndarray  # int64 [n]
    served: np.ndarray  # int64 [n]: served (shuffled) index in its component

    def __len__(self) -> int:
        return len(self.which)

    def __getitem__(self, k: int) -> np.ndarray:
        return self.components[int(self.which[k])][int(self.served[k])]


def spread_indices(samples: GPTSamples, n: int) -> np.ndarray:
    """Served indices of ``min(n, S)`` of the ``S`` samples of a one-epoch GPTSamples, evenly spaced along
    the split: positions ``(2k + 1) * S // (2n)`` (the middle of each of n equal strata) in sample order
    (the order the samples lie in the split), mapped through the inverse of the sample shuffle."""
    total = len(samples)
    n = min(n, total)
    shuffle = np.asarray(samples.shuffle_index, dtype=np.int64)
    if len(shuffle) != total:  # one epoch: the shuffle is a permutation of every sample
        raise BloomstackError(f"{samples!r}: expected a one-epoch index (shuffle of {total}, got {len(shuffle)})")
    served = np.empty(total, dtype=np.int64)
    served[shuffle] = np.arange(total, dtype=np.int64)
    return served[(2 * np.arange(n, dtype=np.int64) + 1) * total // (2 * n)]


class DataSplits:
    """The builder of one run's data (see the module docstring)."""

    def __init__(self, config: SplitsConfig) -> None:
        self.config = config

    def spec(self, path: str) -> BlendSpec:
        """The blend YAML at ``path``, checked against the run's sequence length."""
        spec = load_blend_spec(path)
        if spec.seq_length is not None and spec.seq_length != self.config.seq_length:
            raise BloomstackError(f"{path}: blend seq_length {spec.seq_length} != model.seq_length "
                                  f"{self.config.seq_length}; rebuild the blend or change model.seq_length")
        return spec

    def settings(self, spec: BlendSpec | None) -> SampleSettings:
        """How samples are cut: the run's sequence length and arithmetic, the blend's seed else the config's."""
        c = self.config
        seed = spec.seed if spec is not None and spec.seed is not None else c.seed
        return SampleSettings(c.seq_length, seed, c.compat, c.cache_dir)

    def _blend_path(self, name: Split) -> str:
        path = self.config.valid_blend if name != Split.TRAIN and self.config.valid_blend else self.config.blend
        if path is None:
            raise BloomstackError("no blend YAML to build from; set data.blend (written by `bloomdata blend`)")
        return path

    def split(self, name: Split, num_samples: int) -> Blend | None:
        """The ``name`` split (train, valid) of ``num_samples`` samples; None when the blend has no such
        documents (a validation split of 0)."""
        spec = self.spec(self._blend_path(name))
        if name != Split.TRAIN and not spec.has_valid:
            return None
        return build_blend(spec.prefixes, spec.weights, num_samples, self.settings(spec), spec.split_of(name), name)

    def fixed_set(self, name: str, source: str, split: str | None, samples: int) -> FixedSamples:
        """``samples`` fixed validation samples of ``source`` (a blend YAML, or a dataset prefix read on
        ``split``, else on the training blend's validation split)."""
        spec: BlendSpec | None
        origin: str | None
        if source.endswith((".yaml", ".yml")):
            spec = self.spec(source)
            prefixes, weights, origin = spec.prefixes, spec.weights, source
            split = split or spec.split_of(Split.VALID)
        else:
            if not dataset_exists(source):
                raise BloomstackError(f"no dataset {source}.bin/.idx; give a dataset prefix (as written by "
                                      "`bloomdata build`) or a blend YAML")
            spec = self.spec(self.config.blend) if self.config.blend else None
            prefixes, weights, origin = [source], [1.0], self.config.blend
            split = split or (spec.split_of(Split.VALID) if spec is not None else None)
        if split is None:
            raise BloomstackError(f"no validation split for {source} ({origin or 'no data.blend'} has none); set "
                                  "its split, e.g. '0.95:1' or '949,50,1'")
        settings = self.settings(spec)
        components: list[GPTSamples] = []
        which: list[np.ndarray] = []
        served: list[np.ndarray] = []
        for prefix, count in zip(prefixes, greedy_counts(weights, samples)):
            if count == 0:  # a blend's dataset whose weight gets none of the samples
                continue
            component = GPTSamples(prefix, None, settings, split, Split.VALID)
            chosen = spread_indices(component, count)
            which.append(np.full(len(chosen), len(components), dtype=np.int64))
            components.append(component)
            served.append(chosen)
        return FixedSamples(name, components, np.concatenate(which), np.concatenate(served))



def valid_tokens(blend_yaml: str, compat: Compat = Compat.CORE) -> dict[str, tuple[str, int]]:
    """Each dataset of a blend, by name: (its prefix, the tokens of its validation split; 0 without one), with
    ``compat``'s split arithmetic (which datasets hold enough held-out text for a validation set)."""
    spec = load_blend_spec(blend_yaml)
    split = spec.split_of(Split.VALID)
    tokens = {}
    for d in spec.datasets:
        n = 0
        if split is not None:
            ds = IndexedDataset(d.prefix)
            begin, end = split_range(split, Split.VALID, len(ds), compat)
            n = int(ds.sizes[begin:end].sum(dtype=np.int64))
        tokens[d.name] = (d.prefix, n)
    return tokens
