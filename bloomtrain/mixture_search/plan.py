"""From a search config to proxy jobs: the proxies' training config, validation sets and input fingerprints.

The proxy recipe (``MixtureSearchConfig.proxy_recipe``) becomes a complete one-process run: the tokenizer's
vocabulary, ``ceil(proxy_tokens / (seq_length x global_batch))`` iterations with the warmup shortened to at
most a tenth and the decay over the whole run, no checkpoints, and one evaluation of every dataset's
validation set at the last iteration. Those sets are written once per search (``OUT/valid/<name>.yaml``, one
dataset each, no seed of their own: the proxies' ``data.seed``, the same for all), so every proxy reads the same
validation samples.

A dataset whose validation split holds less than one sample cannot be scored: that is a one-line error
before any proxy runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bloomdata import durable
from bloomdata.blend.spec import BlendDataset, BlendSpec
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDataset, data_file_path, index_file_path
from bloomdata.megatron.splits import Split, split_range
from bloomdata.tokenizer.bpe import load_tokenizer, tokenizer_identity
from bloomtrain.config import VALID_SET_NAME, CheckpointConfig, DataConfig, TrainConfig, ValidSetConfig
from bloomtrain.mixture_search.config import MixtureSearchConfig
from bloomtrain.mixture_search.proxy import BLEND, ProxyJob
from bloomtrain.mixture_search.space import SearchSpace


def validation_split(config: MixtureSearchConfig) -> str:
    split = config.split or config.valid_range
    assert split is not None  # MixtureSearchConfig requires one
    return split


def check_datasets(space: SearchSpace, config: MixtureSearchConfig, seq_length: int) -> None:
    """Every dataset can be a validation set: a metric-safe name, and at least one sample of held-out tokens."""
    split = validation_split(config)
    for name, prefix in space.prefixes.items():
        if not VALID_SET_NAME.fullmatch(name):
            raise BloomstackError(f"dataset {name!r} ({prefix}): a name of letters, digits, '_', '.' or '-' is needed "
                                  "(it becomes the metric valid/NAME/bpb); rename it in datasets (NAME=PREFIX)",
                                  keys=["datasets"])
        ds = IndexedDataset(prefix)
        begin, end = split_range(split, Split.VALID, len(ds), config.compat)
        tokens = int(ds.sizes[begin:end].sum(dtype=np.int64))
        if tokens < seq_length + 1:
            raise BloomstackError(
                f"dataset {name} ({prefix}) has no validation split to score proxies on: the valid part of "
                f"{split} is documents [{begin}, {end}) of {len(ds)}, {tokens} tokens, less than one sample of "
                f"{seq_length + 1}; give a split with a larger validation part (e.g. split 80,20,0) or drop it",
                keys=["split"])


def write_valid_sets(space: SearchSpace, config: MixtureSearchConfig, seq_length: int, out: Path) -> dict[str, str]:
    """``out/<name>.yaml`` per dataset (a one-dataset blend with the search's split); returns name -> path."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, prefix in space.prefixes.items():
        spec = BlendSpec(seq_length=seq_length, split=config.split,
                         train_range=config.train_range, valid_range=config.valid_range,
                         datasets=[BlendDataset(name=name, prefix=prefix, weight=1.0)])
        path = out / f"{name}.yaml"
        if not path.exists() or path.read_text(encoding="utf-8") != spec.to_yaml():
            durable.write_text(path, spec.to_yaml())
        paths[name] = str(path)
    return paths


def proxy_train_config(config: MixtureSearchConfig, vocab_size: int, valid_sets: dict[str, str],
                       cache_dir: Path) -> TrainConfig:
    """The proxies' training config (``data.blend`` is set per proxy; the seed per job)."""
    recipe = config.proxy_recipe()
    seq, batch = recipe.model.seq_length, recipe.schedule.global_batch_size
    iters = max(1, math.ceil(config.proxy_tokens / (seq * batch)))
    samples = iters * batch
    schedule = derive(recipe.schedule, train_iters=iters, train_samples=None, rampup_batch_size=None,
                      decay_samples=samples, warmup_samples=min(recipe.schedule.warmup_samples, samples // 10))
    data = DataConfig(kind="blend", blend=BLEND, compat=config.compat, cache_dir=str(cache_dir),
                      tokenizer=str(Path(config.tokenizer).resolve()),
                      valid_sets={n: ValidSetConfig(path=p, samples=config.valid_samples)
                                  for n, p in valid_sets.items()})
    logging = derive(recipe.logging, dir=None, tensorboard=False, eval_interval=iters, eval_iters=1,
                     log_interval=max(1, iters // 5))
    return derive(recipe, model=derive(recipe.model, vocab_size=vocab_size, pad_vocab_size_to=None),
                  parallel=derive(recipe.parallel, tp=1, pp=1), schedule=schedule, data=data,
                  checkpoint=CheckpointConfig(), logging=logging)


def input_fingerprints(space: SearchSpace, tokenizer: str) -> dict[str, str]:
    """What the proxies read, fingerprinted: each .idx's digest and .bin's size, the tokenizer's sha256."""
    prints = {"tokenizer": tokenizer_identity(tokenizer)}
    for prefix in space.prefixes.values():
        prints[index_file_path(prefix)] = durable.file_digest(index_file_path(prefix))
        prints[data_file_path(prefix)] = str(Path(data_file_path(prefix)).stat().st_size)
    return prints


def vocab_size(tokenizer: str) -> int:
    return load_tokenizer(tokenizer).get_vocab_size(with_added_tokens=True)


def proxy_job(space: SearchSpace, config: MixtureSearchConfig, train: TrainConfig, inputs: dict[str, str],
              weights: np.ndarray, seed: int) -> ProxyJob:
    """The job of one proxy: ``weights`` [d] trained with ``seed``."""
    seeded = derive(train, seed=seed, model=derive(train.model, init_seed=seed))
    iters = seeded.schedule.train_iters or 0  # always set by proxy_train_config
    tokens = iters * seeded.schedule.global_batch_size * seeded.model.seq_length
    return ProxyJob(weights=space.weights(weights), seed=seed, tokens=tokens, train=seeded,
                    prefixes=space.prefixes, split=config.split, train_range=config.train_range,
                    valid_range=config.valid_range, inputs=inputs)
