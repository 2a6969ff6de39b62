"""Training on a real ``bloomdata blend`` YAML (indexed datasets -> GPTSamples -> Blend -> sampler)."""

from __future__ import annotations

import math

import numpy as np

from bloomdata.megatron.indexed import IndexedDatasetWriter
from bloomdata.mixture.spec import BlendDataset, BlendSpec
from tests.bloomtrain.train_helpers import EXACT, train_rank
from tests.gloo_harness import run_distributed


def _write_dataset(prefix, seed: int, vocab: int = 250) -> None:
    rng = np.random.default_rng(seed)
    with IndexedDatasetWriter(prefix, dtype=np.uint16) as w:
        for _ in range(60):
            start, stride = rng.integers(0, vocab), rng.integers(1, 4)
            w.add_document((start + stride * np.arange(rng.integers(20, 90))) % vocab)


def test_trains_and_evaluates_on_a_blend(tmp_path):
    for lang, seed in (("fr", 0), ("sw", 1)):
        _write_dataset(tmp_path / lang, seed)
    spec = BlendSpec(seq_length=32, seed=7, split="80,20,0", datasets=[
        BlendDataset(name="fr", prefix=str(tmp_path / "fr"), weight=0.7),
        BlendDataset(name="sw", prefix=str(tmp_path / "sw"), weight=0.3)])
    (tmp_path / "blend.yaml").write_text(spec.to_yaml())
    r = run_distributed(train_rank, 2, [*EXACT, "data.kind=blend", f"data.blend={tmp_path / 'blend.yaml'}",
                                        f"data.cache_dir={tmp_path / 'cache'}", "schedule.train_iters=3",
                                        "logging.eval_interval=3", "logging.eval_iters=1"], timeout_s=300)
    for rank in r:
        assert rank["error"] is None, rank["error"]
        assert all(math.isfinite(v) for v in rank["losses"].values()) and len(rank["losses"]) == 3
        assert math.isfinite(rank["eval"][3])
    assert r[0]["losses"] == r[1]["losses"]
