"""Training on a real ``bloomdata blend`` YAML (indexed datasets -> GPTSamples -> Blend -> sampler).

The micro-batches each DP rank trains on are recorded by a callback and compared with the Blend's items,
computed directly by bloomdata, in Megatron's pretraining-sampler order: global index order from
``consumed_samples``; each group of micro_batch x DP indices split by DP rank. A resumed run continues
at the saved ``consumed_samples``. A second, named validation set over the same first samples of the
validation blend logs ``valid/<name>/loss`` equal to the run's own ``valid_loss`` (one evaluation path).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from bloomdata.blend.spec import BlendDataset, BlendSpec
from bloomdata.megatron.blend import blend_from_spec
from bloomdata.megatron.indexed import IndexedDatasetWriter
from bloomtrain.callbacks import Callback, ValidSetCallback
from bloomtrain.data import FirstSamples
from tests.bloomtrain.train_helpers import EXACT, train_rank
from tests.harness.gloo_harness import run_distributed

MBS, GBS, DP = 2, 8, 2  # EXACT's batch sizes, on 2 ranks


class RecordSamples(Callback):
    """Records the samples (seq_length + 1 tokens each) of every micro-batch this rank's steps read."""

    def __init__(self) -> None:
        self.recorded: list[np.ndarray] = []

    def pre_step(self, trainer, step) -> None:
        step.batches = map(self._record, step.batches)

    def _record(self, batch):
        tokens, (labels, _mask) = batch
        self.recorded.extend(torch.cat([tokens, labels[:, -1:]], dim=1).numpy().copy())
        return batch


def _write_dataset(prefix, seed: int, vocab: int = 250) -> None:
    rng = np.random.default_rng(seed)
    with IndexedDatasetWriter(prefix, dtype=np.uint16) as w:
        for _ in range(60):
            start, stride = rng.integers(0, vocab), rng.integers(1, 4)
            w.add_document((start + stride * np.arange(rng.integers(20, 90))) % vocab)


def _sampler_order(consumed: int, iterations: int, dp_rank: int) -> list[int]:
    """Megatron's MegatronPretrainingSampler, written out: the global indices this DP rank reads."""
    out = []
    for group in range(consumed, consumed + iterations * GBS, MBS * DP):
        out += range(group + dp_rank * MBS, group + (dp_rank + 1) * MBS)
    return out


@pytest.mark.integration
def test_each_dp_rank_trains_on_the_blend_in_megatron_sampler_order(tmp_path):
    for lang, seed in (("fr", 0), ("sw", 1)):
        _write_dataset(tmp_path / lang, seed)
    spec = BlendSpec(seq_length=32, seed=7, split="80,20,0", datasets=[
        BlendDataset(name="fr", prefix=str(tmp_path / "fr"), weight=0.7),
        BlendDataset(name="sw", prefix=str(tmp_path / "sw"), weight=0.3)])
    (tmp_path / "blend.yaml").write_text(spec.to_yaml())
    cache, ckpt, logs = tmp_path / "cache", tmp_path / "ckpt", tmp_path / "logs"
    run = [*EXACT, "data.kind=blend", f"data.blend={tmp_path / 'blend.yaml'}", f"data.cache_dir={cache}",
           "logging.eval_interval=3", "logging.eval_iters=1", f"checkpoint.dir={ckpt}", f"logging.dir={logs}"]
    # the blends as bloomdata builds them, sized like Megatron's builder: the whole run, one eval batch
    valid = blend_from_spec(spec, 1 * GBS, "valid", cache)

    def callbacks():
        return [RecordSamples(), ValidSetCallback("again", FirstSamples(valid, 1 * GBS), interval=3,
                                                  micro_batch_size=MBS)]

    first = run_distributed(train_rank, DP, [*run, "schedule.train_iters=3"], None, callbacks, timeout_s=300)
    resumed = run_distributed(train_rank, DP, [*run, "schedule.train_iters=4"], None, callbacks, timeout_s=300)
    for consumed, iterations, results in ((0, 3, first), (3 * GBS, 1, resumed)):
        train = blend_from_spec(spec, consumed + iterations * GBS, "train", cache)  # the run's length
        for dp_rank, r in enumerate(results):
            assert r["error"] is None, r["error"]
            got = r["recorded"][0]
            want = [np.asarray(train[i], dtype=np.int64) for i in _sampler_order(consumed, iterations, dp_rank)]
            assert len(got) == len(want) == iterations * GBS // DP
            for k, (g, w) in enumerate(zip(got, want)):
                assert np.array_equal(g, w), (consumed, dp_rank, k)
        assert results[0]["losses"] == results[1]["losses"]  # DP-averaged
        assert all(math.isfinite(v) for v in results[0]["losses"].values())
    assert sorted(first[0]["losses"]) == [1, 2, 3] and sorted(resumed[0]["losses"]) == [4]
    # the two DP ranks read different samples (the split is by rank, not a copy)
    assert not np.array_equal(first[0]["recorded"][0][0], first[1]["recorded"][0][0])

    records = [json.loads(line) for line in (logs / "metrics.jsonl").read_text().splitlines()]
    ours = next(r for r in records if "valid_loss" in r)
    again = next(r for r in records if "valid/again/loss" in r)
    assert ours["iteration"] == again["iteration"] == 3 and math.isfinite(ours["valid_loss"])
    assert again["valid/again/loss"] == ours["valid_loss"] == first[0]["eval"][3]


@pytest.mark.integration
def test_token_ids_beyond_the_model_vocabulary_fail_on_the_host_naming_the_range(tmp_path):
    """Data tokenized with a larger vocabulary (300 ids) than the model's 256 embedding rows: the first micro-batch
    fails before it reaches the model, in one line that says so (checked on the host by the engine's batch hook,
    bloomtrain.data.to_device, not on the device: no host sync per micro-batch on a GPU)."""
    _write_dataset(tmp_path / "big", 0, vocab=300)
    spec = BlendSpec(seq_length=32, seed=7, split="100,0,0",
                     datasets=[BlendDataset(name="big", prefix=str(tmp_path / "big"), weight=1.0)])
    (tmp_path / "blend.yaml").write_text(spec.to_yaml())
    run = [*EXACT, "data.kind=blend", f"data.blend={tmp_path / 'blend.yaml'}", f"data.cache_dir={tmp_path / 'c'}",
           "schedule.train_iters=2"]
    [result] = run_distributed(train_rank, 1, run, timeout_s=300)
    assert result["losses"] == {}
    error = result["error"]
    assert error.startswith("BloomstackError: token id out of range [0, 256): min "), error
    assert error.endswith("; the data was tokenized with a larger vocabulary than the model config"), error
    assert 256 <= int(error.split("max ")[1].split(";")[0]) < 300


def test_to_device_checks_ids_and_labels_and_leaves_cpu_batches_alone():
    from bloomdata.errors import BloomstackError
    from bloomtrain.data import collate, to_device

    batch = collate([np.arange(9) % 7, np.arange(9) % 5])
    assert to_device(batch, torch.device("cpu"), vocab_rows=7) is batch
    with pytest.raises(BloomstackError, match=r"^token id out of range \[0, 6\): min 0, max 6; the data"):
        to_device(batch, torch.device("cpu"), vocab_rows=6)
    last_only = collate([np.array([1, 2, 3, 9])])  # 9 is only ever a label
    with pytest.raises(BloomstackError, match=r"max 9"):
        to_device(last_only, torch.device("cpu"), vocab_rows=8)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_to_device_copies_from_pinned_memory_without_blocking():
    from bloomtrain.data import collate, to_device

    batch = collate([np.arange(9), np.arange(1, 10)])
    ids, (labels, mask) = to_device(batch, torch.device("cuda"), vocab_rows=16)
    assert ids.is_cuda and labels.is_cuda and mask.is_cuda
    assert torch.equal(ids.cpu(), batch[0]) and torch.equal(labels.cpu(), batch[1][0])
    assert torch.equal(mask.cpu(), batch[1][1])
