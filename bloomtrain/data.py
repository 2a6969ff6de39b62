"""Training data: samples of ``seq_length + 1`` tokens, consumed in Megatron's pretraining-sampler order.

The adapter is thin on purpose: anything indexable that returns a 1-D token array per sample works (a
bloomdata ``GPTSamples`` or ``Blend``, or ``SyntheticSamples`` for tests and benchmarks). Order follows
Megatron's ``MegatronPretrainingSampler`` (megatron/data/data_samplers.py): the global order is the index
order ``consumed, consumed + 1, ...``; each group of ``micro_batch x DP`` consecutive indices is split by
data-parallel rank into ``[rank * mbs, (rank + 1) * mbs)``. The order therefore does not depend on the
batch-size ramp-up, and resuming needs one integer, ``consumed_samples``.

A micro-batch is ``(input_ids [b, s], (labels [b, s], loss_mask [b, s]))``: the shape DeepSpeed's pipeline
engine feeds to the first stage (inputs) and to the loss on the last stage (labels).

Named validation sets (``data.valid_sets``, ``build_valid_sets``) are fixed samples instead of a stream: one
epoch of a split's samples is indexed, and a fixed number of them, evenly spaced along the split, is read
at every evaluation. Their micro-batches (``eval_micro_batches``) follow the same sampler order and pad the
last group with masked copies, so every layout reads exactly the same samples. ``token_byte_lengths``
gives the UTF-8 bytes of every token id, for bits per byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from bloomdata.errors import BloomstackError
from bloomtrain.config import VALID_SET_NAME, TrainConfig, ValidSetConfig
from bloomtrain.parallel.layers import check_token_range

MicroBatch = tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


class Samples(Protocol):
    """What the trainer reads samples from: ``len`` and one sample (``seq_length + 1`` token ids) per index,
    as a bloomdata ``Blend`` or ``GPTSamples``, ``SyntheticSamples`` or ``ValidSamples`` give."""

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


def build_datasets(cfg: TrainConfig) -> tuple[Samples, Samples | None]:
    """(train, valid) sample sequences for ``cfg.data``; each item is ``seq_length + 1`` token ids."""
    length = cfg.model.seq_length + 1
    if cfg.data.kind == "synthetic":
        n = cfg.data.synthetic_samples
        vocab = cfg.model.vocab_size
        return (SyntheticSamples(n, length, vocab, cfg.data.seed),
                SyntheticSamples(max(1, n // 4), length, vocab, cfg.data.seed + 1))
    return _blend_datasets(cfg)


def _blend_datasets(cfg: TrainConfig) -> tuple[Samples, Samples | None]:
    """Blends from ``bloomdata blend`` YAMLs, sized like Megatron's builder: the train blend holds the whole
    run, the validation blend the ``eval_iters`` global batches that every evaluation reads."""
    from bloomdata.blend.spec import load_blend_spec  # noqa: PLC0415
    from bloomdata.megatron.blend import blend_from_spec  # noqa: PLC0415

    s = cfg.schedule
    n_train = s.train_samples if s.train_samples is not None else (s.train_iters or 0) * s.global_batch_size
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

    assert cfg.data.blend is not None  # DataConfig checks kind=blend has one
    train = load(cfg.data.blend, "train", n_train)
    valid_path = cfg.data.valid_blend or cfg.data.blend
    spec = load_blend_spec(valid_path)
    valid = load(valid_path, "valid", n_valid) if spec.has_valid and cfg.logging.eval_interval else None
    return train, valid


# --- named validation sets ------------------------------------------------------------------------------


@dataclass
class ValidSamples:
    """The fixed samples of one named validation set: item k is ``components[which[k]][served[k]]``."""

    name: str
    components: list  # GPTSamples, one epoch of each dataset's validation split
    which: np.ndarray  # int64 [n]
    served: np.ndarray  # int64 [n]: served (shuffled) index in its component

    def __len__(self) -> int:
        return len(self.which)

    def __getitem__(self, k: int) -> np.ndarray:
        return self.components[int(self.which[k])][int(self.served[k])]


def spread_indices(samples, n: int) -> np.ndarray:
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


def blend_counts(weights: Sequence[float], n: int) -> list[int]:
    """Samples per dataset of an ``n``-sample Megatron blend: sample k goes to ``argmax(w * max(k, 1) - c)``
    (ties to the first), ``c`` counting what each dataset gave so far (bloomdata.megatron.blend)."""
    w = np.asarray(weights, dtype=np.float64) / np.sum(weights)
    counts = np.zeros(len(w), dtype=np.int64)
    for k in range(n):
        counts[int(np.argmax(w * max(k, 1) - counts))] += 1
    return counts.tolist()


def _blend_spec(path: str, seq_length: int):
    from bloomdata.blend.spec import load_blend_spec  # noqa: PLC0415

    spec = load_blend_spec(path)
    if spec.seq_length is not None and spec.seq_length != seq_length:
        raise BloomstackError(
            f"{path}: blend seq_length {spec.seq_length} != model.seq_length {seq_length}; "
            "rebuild the blend or change model.seq_length"
        )
    return spec


def build_valid_set(cfg: TrainConfig, name: str, vs: ValidSetConfig) -> ValidSamples:
    """The fixed samples of ``data.valid_sets[name]`` (see ``ValidSetConfig`` for which)."""
    from bloomdata.megatron.gpt_samples import GPTSamples, SampleSettings  # noqa: PLC0415
    from bloomdata.megatron.indexed import dataset_exists  # noqa: PLC0415

    seq = cfg.model.seq_length
    origin: str | None  # what the validation split comes from, for the error below
    if vs.path.endswith((".yaml", ".yml")):
        spec = _blend_spec(vs.path, seq)
        prefixes, weights = spec.prefixes, spec.weights
        split, seed, origin = vs.split or spec.split_of("valid"), spec.seed, vs.path
    else:
        if not dataset_exists(vs.path):
            raise BloomstackError(f"data.valid_sets.{name}: no dataset {vs.path}.bin/.idx; give a dataset prefix "
                                  "(as written by `bloomdata build`) or a blend YAML")
        spec = _blend_spec(cfg.data.blend, seq) if cfg.data.blend else None
        prefixes, weights = [vs.path], [1.0]
        split = vs.split or (spec.split_of("valid") if spec is not None else None)
        seed, origin = (spec.seed if spec is not None else None), cfg.data.blend
    if split is None:
        raise BloomstackError(f"data.valid_sets.{name}: no validation split for {vs.path} ({origin or 'no data.blend'} "
                              f"has none); set data.valid_sets.{name}.split, e.g. '0.95:1' or '949,50,1'")
    wanted = vs.samples or cfg.logging.eval_iters * cfg.schedule.global_batch_size
    components: list[Any] = []
    which: list[Any] = []
    served: list[Any] = []
    for prefix, count in zip(prefixes, blend_counts(weights, wanted)):
        if count == 0:  # a blend's dataset whose weight gets none of the samples
            continue
        try:
            settings = SampleSettings(seq, 1234 if seed is None else seed, cfg.data.compat, cfg.data.cache_dir)
            samples = GPTSamples(prefix, None, settings, split, "valid")
        except BloomstackError as exc:
            raise BloomstackError(f"data.valid_sets.{name}: {exc}") from None
        chosen = spread_indices(samples, count)
        which.append(np.full(len(chosen), len(components), dtype=np.int64))
        components.append(samples)
        served.append(chosen)
    return ValidSamples(name, components, np.concatenate(which), np.concatenate(served))


def build_valid_sets(cfg: TrainConfig) -> dict[str, ValidSamples]:
    """Every named validation set of ``cfg`` (none when evaluation is off)."""
    if not cfg.logging.eval_interval:
        return {}
    return {name: build_valid_set(cfg, name, vs) for name, vs in cfg.data.valid_sets.items()}


def per_dataset_valid_sets(blend_yaml: str, seq_length: int, compat: str = "core") -> tuple[dict[str, str], list[str]]:
    """One validation set per dataset of a blend (a language in the pipeline): ``{name: prefix}`` for those
    whose validation split (``BlendSpec.split_of("valid")``, with the trainer's ``compat`` arithmetic) holds at
    least one sample of ``seq_length + 1`` tokens, and the names left out (too little held-out text)."""
    from bloomdata.blend.spec import load_blend_spec  # noqa: PLC0415
    from bloomdata.megatron.indexed import IndexedDataset  # noqa: PLC0415
    from bloomdata.megatron.splits import split_range  # noqa: PLC0415

    spec = load_blend_spec(blend_yaml)
    split = spec.split_of("valid")
    sets: dict[str, str] = {}
    left_out: list[str] = []
    for d in spec.datasets:
        tokens = 0
        if split is not None and VALID_SET_NAME.fullmatch(d.name):
            ds = IndexedDataset(d.prefix)
            begin, end = split_range(split, "valid", len(ds), compat)
            tokens = int(ds.sizes[begin:end].sum(dtype=np.int64))
        if tokens > seq_length:
            sets[d.name] = d.prefix
        else:
            left_out.append(d.name)
    return sets, left_out


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
