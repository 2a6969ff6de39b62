"""Training data: samples of ``seq_length + 1`` tokens, consumed in Megatron's pretraining-sampler order.

The adapter is thin on purpose: anything indexable that returns a 1-D token array per sample works (a
bloomdata ``GPTSamples`` or ``Blend``, or ``SyntheticSamples`` for tests and benchmarks). Order follows
Megatron's ``MegatronPretrainingSampler`` (megatron/data/data_samplers.py): the global order is the index
order ``consumed, consumed + 1, ...``; each group of ``micro_batch x DP`` consecutive indices is split by
data-parallel rank into ``[rank * mbs, (rank + 1) * mbs)``. The order therefore does not depend on the
batch-size ramp-up, and resuming needs one integer, ``consumed_samples``.

A micro-batch is ``(input_ids [b, s], (labels [b, s], loss_mask [b, s]))``: the shape DeepSpeed's pipeline
engine feeds to the first stage (inputs) and to the loss on the last stage (labels).

The blend data is built where the data lives (``bloomdata.megatron.builder.DataSplits``, from one config:
``data_splits``); this module only asks for the splits. Named validation sets (``data.valid_sets``,
``build_valid_sets``) are fixed samples instead of a stream: one epoch of a split's samples is indexed, and a
fixed number of them, evenly spaced along the split, is read at every evaluation. Their micro-batches
(``eval_micro_batches``) follow the same sampler order and pad the last group with masked copies, so every layout reads
exactly the same samples. ``token_byte_lengths`` gives the UTF-8 bytes of every token id, for bits per byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import numpy as np
import torch

from bloomdata.errors import BloomstackError
from bloomdata.megatron.builder import DataSplits, FixedSamples, SplitsConfig, valid_tokens
from bloomdata.megatron.splits import Compat, Split
from bloomtrain.config import VALID_SET_NAME, TrainConfig
from bloomtrain.parallel.layers import check_token_range

MicroBatch = tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


class Samples(Protocol):
    """What the trainer reads samples from: ``len`` and one sample (``seq_length + 1`` token ids) per index,
    as a bloomdata ``Blend``, ``GPTSamples`` or ``FixedSamples``, or ``SyntheticSamples`` give."""

    def __len__(self) -> int: ...

    def __getitem__(self, i: int) -> Any: ...


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


def to_device(batch: MicroBatch, device: torch.device, vocab_rows: int | None = None) -> MicroBatch:
    """The engine's post-processing of every micro-batch it reads (``TrainModule``): the token range checked on
    the host (ids and labels), then, for an accelerator, each tensor pinned and copied without blocking (a copy
    from pageable memory waits for the device's queue: a host sync per tensor). The engine's own ``.to(device)``
    is then a no-op."""
    ids, (labels, loss_mask) = batch
    if vocab_rows is not None:
        check_token_range(ids, vocab_rows)
        check_token_range(labels, vocab_rows)
    if device.type == "cpu":
        return batch

    def move(t: torch.Tensor) -> torch.Tensor:
        return t.pin_memory().to(device, non_blocking=True) if t.device.type == "cpu" else t.to(device)

    return move(ids), (move(labels), move(loss_mask))


def micro_batches(dataset: Samples, consumed_samples: int, micro_batch_size: int, dp_rank: int,
                  dp_size: int) -> Iterator[MicroBatch]:
    """Infinite-looking iterator for the engine; raises a clear error when the dataset runs out."""
    for indices in pretraining_indices(consumed_samples, micro_batch_size, dp_rank, dp_size, len(dataset)):
        yield collate([dataset[i] for i in indices])
    raise BloomstackError(
        f"training data exhausted after {len(dataset)} samples; build the dataset/blend with at least "
        "schedule.train_samples samples (or lower the training length)"
    )


def eval_micro_batches(samples: Samples, micro_batch_size: int, dp_rank: int,
                       dp_size: int) -> tuple[Iterator[MicroBatch], int]:
    """This DP rank's micro-batches over all of ``samples`` (sampler order), and how many there are.

    The sample count is padded up to a multiple of micro_batch x DP with copies of sample 0 whose loss mask
    is 0: every rank then runs the same number of micro-batches and no sample is dropped or read twice,
    whatever the layout. A pad-only micro-batch has a 0/0 (NaN) mean; its weight, its mask's sum, is 0.
    """
    n, group = len(samples), micro_batch_size * dp_size
    padded = -(-n // group) * group

    def batches() -> Iterator[MicroBatch]:
        for indices in pretraining_indices(0, micro_batch_size, dp_rank, dp_size, padded):
            ids, (labels, mask) = collate([samples[i if i < n else 0] for i in indices])
            mask[[k for k, i in enumerate(indices) if i >= n]] = 0.0
            yield ids, (labels, mask)

    return batches(), padded // group


def data_splits(cfg: TrainConfig) -> DataSplits:
    """The builder of ``cfg``'s blend data (bloomdata.megatron.builder): its blends, the model's sequence length,
    ``data.seed`` for a blend YAML that names no seed, the index arithmetic and cache."""
    d = cfg.data
    return DataSplits(SplitsConfig(seq_length=cfg.model.seq_length, seed=d.seed, blend=d.blend,
                                   valid_blend=d.valid_blend, compat=d.compat, cache_dir=d.cache_dir))


def build_datasets(cfg: TrainConfig) -> tuple[Samples, Samples | None]:
    """(train, valid) sample sequences for ``cfg.data``; each item is ``seq_length + 1`` token ids. Blends are
    sized like Megatron's builder: the train blend holds the whole run, the validation blend the ``eval_iters``
    global batches that every evaluation reads."""
    length = cfg.model.seq_length + 1
    if cfg.data.kind == "synthetic":
        n = cfg.data.synthetic_samples
        vocab = cfg.model.vocab_size
        return (SyntheticSamples(n, length, vocab, cfg.data.seed),
                SyntheticSamples(max(1, n // 4), length, vocab, cfg.data.seed + 1))
    s = cfg.schedule
    splits = data_splits(cfg)
    train = splits.split(Split.TRAIN, s.train_samples if s.train_samples is not None
                         else (s.train_iters or 0) * s.global_batch_size)
    valid = (splits.split(Split.VALID, cfg.logging.eval_iters * s.global_batch_size)
             if cfg.logging.eval_interval else None)
    assert train is not None  # the train split always exists
    return train, valid


# --- named validation sets ------------------------------------------------------------------------------


class FirstSamples:
    """The first ``min(n, len(samples))`` samples of ``samples``: the run's overall validation set (the first
    ``eval_iters`` global batches of its validation split, the same at every evaluation)."""

    def __init__(self, samples: Samples, n: int) -> None:
        self.samples, self.n = samples, min(n, len(samples))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        if not 0 <= i < self.n:
            raise IndexError(i)
        return self.samples[i]


def build_valid_sets(cfg: TrainConfig) -> dict[str, FixedSamples]:
    """Every named validation set of ``cfg`` (none when evaluation is off): ``data.valid_sets[name]``'s fixed
    samples (see ``ValidSetConfig`` for which)."""
    if not cfg.logging.eval_interval:
        return {}
    splits, sets = data_splits(cfg), {}
    for name, vs in cfg.data.valid_sets.items():
        wanted = vs.samples or cfg.logging.eval_iters * cfg.schedule.global_batch_size
        try:
            sets[name] = splits.fixed_set(name, vs.path, vs.split, wanted)
        except BloomstackError as exc:
            raise BloomstackError(f"data.valid_sets.{name}: {exc}") from None
    return sets


def per_dataset_valid_sets(blend_yaml: str, seq_length: int,
                           compat: Compat = Compat.CORE) -> tuple[dict[str, str], list[str]]:
    """One validation set per dataset of a blend (a language in the pipeline): ``{name: prefix}`` for those
    whose validation split (``BlendSpec.split_of(Split.VALID)``, with the trainer's ``compat`` arithmetic) holds at
    least one sample of ``seq_length + 1`` tokens, and the names left out (too little held-out text)."""
    found = valid_tokens(blend_yaml, compat)
    sets = {name: prefix for name, (prefix, n) in found.items() if VALID_SET_NAME.fullmatch(name) and n > seq_length}
    return sets, [name for name in found if name not in sets]


def token_byte_lengths(tokenizer) -> np.ndarray:
    """UTF-8 bytes that each token id of a byte-level BPE ``tokenizers.Tokenizer`` decodes to (int64 [vocab]).

    A byte-level token is a string over a 256-character alphabet, one character per byte (GPT-2's
    bytes_to_unicode), so its bytes are its characters; decoding a sequence concatenates the tokens' bytes,
    so a sequence's bytes are the sum over its tokens, even where a sample's edge cuts a multi-byte
    character. Special tokens (``</s>``, ``<pad>``, ...) are markers, not text, and count 0 bytes (what
    ``decode(skip_special_tokens=True)`` gives); other added tokens count their content's UTF-8 bytes.
    """
    from tokenizers import pre_tokenizers  # noqa: PLC0415

    decoder = json.loads(tokenizer.to_str()).get("decoder") or {}
    kinds = [d.get("type") for d in decoder.get("decoders", [decoder])]
    if "ByteLevel" not in kinds:
        raise BloomstackError(f"data.tokenizer: decoder {kinds} is not byte-level; bits per byte need a byte-level "
                              "BPE tokenizer (as `bloomdata train-tokenizer` writes)")
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    added = tokenizer.get_added_tokens_decoder()
    table = np.zeros(tokenizer.get_vocab_size(with_added_tokens=True), dtype=np.int64)
    for token, i in tokenizer.get_vocab(with_added_tokens=True).items():
        if i in added:
            table[i] = 0 if added[i].special else len(added[i].content.encode("utf-8"))
        elif set(token) <= alphabet:
            table[i] = len(token)
        else:
            raise BloomstackError(f"data.tokenizer: token {token!r} (id {i}) is not over the byte-level alphabet; "
                                  "use the tokenizer.json the datasets were built with")
    return table
