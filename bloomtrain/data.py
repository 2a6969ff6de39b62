"""Training data: samples of ``seq_length + 1`` tokens, consumed in Megatron's pretraining-sampler order.

The adapter is thin on purpose: anything indexable that returns a 1-D token array per sample works (a
bloomdata ``GPTSamples`` or ``Blend``, or ``SyntheticSamples`` for tests and benchmarks). Order follows
Megatron's ``MegatronPretrainingSampler`` (megatron/data/data_samplers.py): the global order is the index
order ``consumed, consumed + 1, ...``; each group of ``micro_batch x DP`` consecutive indices is split by
data-parallel rank into ``[rank * mbs, (rank + 1) * mbs)``. The order therefore does not depend on the
batch-size ramp-up, and resuming needs one integer, ``consumed_samples``.

A micro-batch is ``(input_ids [b, s], (labels [b, s], loss_mask [b, s]))``: the shape DeepSpeed's pipeline
engine feeds to the first stage (inputs) and to the loss on the last stage (labels).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from bloomdata.errors import BloomstackError
from bloomtrain.config import TrainConfig

MicroBatch = tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


class SyntheticSamples:
    """``n`` samples of ``length`` token ids in ``[0, vocab)``; sample i depends only on (seed, i).

    Each sample is an arithmetic progression ``(start + stride * k) mod vocab`` with a random start and a
    stride in 1..3: learnable (the loss falls well below ln(vocab) within a few steps), unlike uniform
    noise, so loss curves of smoke runs and benchmarks mean something.
    """

    def __init__(self, n: int, length: int, vocab: int, seed: int) -> None:
        self.n, self.length, self.vocab, self.seed = n, length, vocab, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        if not 0 <= i < self.n:
            raise IndexError(i)
        rng = np.random.default_rng((self.seed, i))
        start, stride = rng.integers(0, self.vocab), rng.integers(1, 4)
        return (start + stride * np.arange(self.length, dtype=np.int64)) % self.vocab


def pretraining_indices(consumed_samples: int, micro_batch_size: int, dp_rank: int, dp_size: int,
                        total_samples: int) -> Iterator[list[int]]:
    """This DP rank's sample indices, one micro-batch at a time, from ``consumed_samples`` on (drop_last)."""
    if consumed_samples % (micro_batch_size * dp_size):
        # Megatron asserts this too: a resume must start on a micro-batch-group boundary.
        raise BloomstackError(
            f"consumed_samples={consumed_samples} is not a multiple of micro_batch_size x DP = "
            f"{micro_batch_size * dp_size}; resume with the micro-batch size and DP the checkpoint was saved with "
            "or convert it to a universal checkpoint"
        )
    step = micro_batch_size * dp_size
    for start in range(consumed_samples, total_samples - step + 1, step):
        first = start + dp_rank * micro_batch_size
        yield list(range(first, first + micro_batch_size))


def collate(samples: Sequence[Any]) -> MicroBatch:
    tokens = torch.from_numpy(np.stack([np.asarray(s, dtype=np.int64) for s in samples]))
    labels = tokens[:, 1:].contiguous()
    return tokens[:, :-1].contiguous(), (labels, torch.ones(labels.shape, dtype=torch.float32))


def micro_batches(dataset: Sequence, consumed_samples: int, micro_batch_size: int, dp_rank: int,
                  dp_size: int) -> Iterator[MicroBatch]:
    """Infinite-looking iterator for the engine; raises a clear error when the dataset runs out."""
    for indices in pretraining_indices(consumed_samples, micro_batch_size, dp_rank, dp_size, len(dataset)):
        yield collate([dataset[i] for i in indices])
    raise BloomstackError(
        f"training data exhausted after {len(dataset)} samples; build the dataset/blend with at least "
        "schedule.train_samples samples (or lower the training length)"
    )


def build_datasets(cfg: TrainConfig) -> tuple[Sequence, Sequence | None]:
    """(train, valid) sample sequences for ``cfg.data``; each item is ``seq_length + 1`` token ids."""
    length = cfg.model.seq_length + 1
    if cfg.data.kind == "synthetic":
        n = cfg.data.synthetic_samples
        vocab = cfg.model.vocab_size
        return (SyntheticSamples(n, length, vocab, cfg.data.seed),
                SyntheticSamples(max(1, n // 4), length, vocab, cfg.data.seed + 1))
    return _blend_datasets(cfg)


def _blend_datasets(cfg: TrainConfig) -> tuple[Sequence, Sequence | None]:
    """Blends from ``bloomdata blend`` YAMLs, sized like Megatron's builder: the train blend holds the whole
    run, the validation blend the ``eval_iters`` global batches that every evaluation reads."""
    from bloomdata.megatron.blend import blend_from_spec  # noqa: PLC0415
    from bloomdata.mixture.spec import load_blend_spec  # noqa: PLC0415

    s = cfg.schedule
    n_train = s.train_samples if s.train_samples is not None else s.train_iters * s.global_batch_size
    n_valid = cfg.logging.eval_iters * s.global_batch_size

    def load(path: str, split: str, n: int):
        spec = load_blend_spec(path)
        if spec.seq_length is not None and spec.seq_length != cfg.model.seq_length:
            raise BloomstackError(
                f"{path}: blend seq_length {spec.seq_length} != model.seq_length {cfg.model.seq_length}; "
                "rebuild the blend or change model.seq_length"
            )
        spec = spec.model_copy(update={"seq_length": cfg.model.seq_length})
        return blend_from_spec(spec, n, split, cfg.data.cache_dir, cfg.data.compat)

    train = load(cfg.data.blend, "train", n_train)
    valid_path = cfg.data.valid_blend or cfg.data.blend
    spec = load_blend_spec(valid_path)
    has_valid = spec.valid_range is not None or (spec.split is not None and _split_has_valid(spec.split))
    valid = load(valid_path, "valid", n_valid) if has_valid and cfg.logging.eval_interval else None
    return train, valid


def _split_has_valid(split: str) -> bool:
    parts = [float(x) for x in split.replace("/", ",").split(",") if x.strip()]
    return len(parts) > 1 and parts[1] > 0
