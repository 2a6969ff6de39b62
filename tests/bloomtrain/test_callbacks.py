"""Callbacks: named in the config (no edit of the trainer), their state saved in checkpoints, on_error.

The state test is the one that matters for a long run: loss-spike detection compares each loss with a running
mean, which a resume used to forget (the first iterations after it compared against nothing). A spike factor
of 0.5 flags every iteration that has a mean before it, so a forgotten mean shows at once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bloomdata.errors import BloomstackError
from bloomtrain.callbacks import StopRequestsCallback, ValidSetCallback
from bloomtrain.callbacks.base import by_state_key
from bloomtrain.callbacks.configured import configured_callbacks
from bloomtrain.config import CallbackSpec, CheckpointConfig, load_config
from bloomtrain.data import FirstSamples, SyntheticSamples
from bloomtrain.metrics import read_metrics
from tests.bloomtrain.callback_probe import Probe
from tests.bloomtrain.train_helpers import EXACT, TINY, train_rank
from tests.harness.gloo_harness import run_distributed

PROBE = "tests.bloomtrain.callback_probe:Probe"


def _run(run_dir: Path, iters: int, *extra: str) -> dict:
    overrides = [*EXACT, f"schedule.train_iters={iters}", f"checkpoint.dir={run_dir / 'ckpt'}",
                 "checkpoint.save_interval=3", f"logging.dir={run_dir / 'logs'}", "stability.spike_factor=0.5",
                 f"callbacks=[{{target: {PROBE}, args: {{out: {run_dir / 'probe.json'}}}}}]", *extra]
    return run_distributed(train_rank, 1, overrides, timeout_s=300)[0]


def _spikes(run_dir: Path) -> dict[int, int]:
    train, _ = read_metrics(run_dir / "logs" / "metrics.jsonl")
    return {r["iteration"]: r["loss_spike"] for r in train}


@pytest.mark.integration
def test_a_resumed_run_flags_the_same_loss_spikes_and_keeps_user_callback_state(tmp_path):
    whole = _run(tmp_path / "whole", 6)
    assert whole["error"] is None, whole["error"]
    first = _run(tmp_path / "resumed", 3)  # saves at iteration 3 and ends
    resumed = _run(tmp_path / "resumed", 6)  # resumes there
    assert first["error"] is None and resumed["error"] is None, (first["error"], resumed["error"])
    assert [resumed["losses"][i] for i in (4, 5, 6)] == [whole["losses"][i] for i in (4, 5, 6)]  # fp32: bitwise
    assert _spikes(tmp_path / "resumed") == _spikes(tmp_path / "whole") == {1: 0, **dict.fromkeys(range(2, 7), 1)}
    # the probe, added by the config alone, ran and got its state back from the checkpoint
    probe = json.loads((tmp_path / "resumed" / "probe.json").read_text())
    assert probe == {"label": "probe", "seen": 6, "resumed_with": {"seen": 3}, "ended": "finished"}


@pytest.mark.integration
def test_on_error_sees_the_error_before_it_propagates(tmp_path):
    run = _run(tmp_path, 4, "stability.inject_nan_at_iters=[2]", "stability.max_consecutive_skips=1")
    assert run["error"] is not None and "consecutive iterations had a non-finite loss" in run["error"]
    probe = json.loads((tmp_path / "probe.json").read_text())
    assert probe["ended"] == "error" and probe["seen"] == 1 and "non-finite loss" in probe["error"]


def _train_in_order(overrides: list[str], probe_out: str, reverse: bool) -> dict:
    """Train with the run's callbacks (a stateful user one among them) handed to the Trainer in the order
    build_trainer gives, or reversed; what the last checkpoint saved."""
    import hashlib

    from bloomtrain.train import build_trainer
    from bloomtrain.trainer import Trainer

    built = build_trainer(load_config(TINY, overrides), callbacks=[Probe(probe_out)])
    given = built.callbacks[::-1] if reverse else built.callbacks
    trainer = Trainer(built.cfg, built.module, built.state, built.train_data, built.checkpointer, given)
    result = trainer.fit()
    saved = trainer.checkpointer.load()
    assert saved is not None
    weights = hashlib.sha256()
    for name, tensor in sorted(trainer.module.engine.module.state_dict().items()):
        weights.update(name.encode() + tensor.detach().float().numpy().tobytes())
    return {"given": [type(cb).__name__ for cb in given], "ran": [type(cb).__name__ for cb in trainer.callbacks],
            "position": saved.position, "callbacks": saved.callbacks, "weights": weights.hexdigest(),
            "losses": result.losses}


@pytest.mark.integration
def test_callbacks_run_by_priority_so_a_reversed_list_saves_the_same_checkpoint(tmp_path):
    """The checkpoint callback saves after every callback that changes its state in the iteration, whatever the
    order they were passed in: the probe counts iterations in post_step, so a save before it would hold 2."""
    runs = {}
    for reverse in (False, True):
        run_dir = tmp_path / ("reversed" if reverse else "given")
        overrides = [*EXACT, "schedule.train_iters=3", f"checkpoint.dir={run_dir / 'ckpt'}",
                     "checkpoint.save_interval=3", f"logging.dir={run_dir / 'logs'}"]
        runs[reverse] = run_distributed(_train_in_order, 1, overrides, str(run_dir / "probe.json"), reverse,
                                        timeout_s=300)[0]
    given, reversed_ = runs[False], runs[True]
    assert reversed_["callbacks"] == given["callbacks"] and given["callbacks"]["probe:probe"] == {"seen": 3}
    assert (reversed_["position"], reversed_["weights"], reversed_["losses"]) == \
        (given["position"], given["weights"], given["losses"])
    assert reversed_["given"] == given["given"][::-1] and reversed_["ran"] == given["ran"]
    assert given["ran"][:2] == ["NanDrillCallback", "MetricsCallback"] and given["ran"][-1] == "CheckpointCallback"


def test_a_configured_callback_that_cannot_be_built_is_one_line_naming_it(tmp_path):
    with pytest.raises(BloomstackError, match=r"^callbacks\[0\] \(tests\.nowhere:Probe\): cannot import it"):
        configured_callbacks([CallbackSpec(target="tests.nowhere:Probe")])
    with pytest.raises(BloomstackError, match=r"^callbacks\[1\] .*: not a subclass of bloomtrain\.callbacks\.Callback"):
        configured_callbacks([CallbackSpec(target=PROBE, args={"out": "x"}),
                              CallbackSpec(target="bloomtrain.config:TrainConfig")])
    with pytest.raises(BloomstackError, match=r"constructor rejected args \{'outt': 'x'\}.*fix callbacks\[0\]\.args"):
        configured_callbacks([CallbackSpec(target=PROBE, args={"outt": "x"})])
    assert CallbackSpec.model_validate(PROBE) == CallbackSpec(target=PROBE)  # the string form
    assert isinstance(configured_callbacks([CallbackSpec(target=PROBE, args={"out": "x"})])[0], Probe)
    # a malformed target is the loader's error, naming the key and where it was set
    with pytest.raises(BloomstackError, match=r"override callbacks=\[probe\]: callbacks\.0\.target: .*"
                                              r"not package\.module:ClassName"):
        load_config(TINY, ["callbacks=[probe]"])


class RecordingValidSet(ValidSetCallback):
    """A validation set that records the state a resume hands it."""

    recorded: dict | None = None

    def load_state_dict(self, state: dict) -> None:
        self.recorded = dict(state)
        super().load_state_dict(state)


def _keyed_callbacks(run_dir: Path, reverse: bool):
    """Two probes counting differently and two validation sets of different samples, in a given or reversed order
    (built in the rank)."""

    def build() -> list:
        cfg = load_config(TINY, [])
        sets = [RecordingValidSet(name, FirstSamples(SyntheticSamples(8, cfg.model.seq_length + 1,
                                                                      cfg.model.vocab_size, seed), 8),
                                  interval=2, micro_batch_size=2) for name, seed in (("x", 5), ("y", 6))]
        probes = [Probe(str(run_dir / f"{label}.json"), label, every) for label, every in (("a", 1), ("b", 2))]
        given = [*probes, *sets]
        return given[::-1] if reverse else given

    return build


@pytest.mark.integration
def test_a_resumed_run_with_reordered_callbacks_hands_each_its_own_state(tmp_path):
    """State is keyed by name (``state_key``), not by class and place: after a resume with the callbacks list
    reversed, each probe and each validation set gets back the state it saved."""
    base = [*EXACT, f"checkpoint.dir={tmp_path / 'ckpt'}", f"logging.dir={tmp_path / 'logs'}",
            "logging.eval_interval=2", "logging.eval_iters=1"]
    first = run_distributed(train_rank, 1, [*base, "schedule.train_iters=4"], None,
                            _keyed_callbacks(tmp_path, False), timeout_s=300)[0]
    assert first["error"] is None, first["error"]
    _, evals = read_metrics(tmp_path / "logs" / "metrics.jsonl")
    saved = {name: min((r[f"valid/{name}/loss"], r["iteration"]) for r in evals) for name in ("x", "y")}
    assert saved["x"][0] != saved["y"][0]  # different samples: a swap would show
    resumed = run_distributed(train_rank, 1, [*base, "schedule.train_iters=6"], None,
                              _keyed_callbacks(tmp_path, True), timeout_s=300)[0]
    assert resumed["error"] is None, resumed["error"]
    got_y, got_x, _, _ = resumed["recorded"]  # reversed: y, x, probe b, probe a
    assert got_x == {"best_loss": saved["x"][0], "best_iteration": saved["x"][1]}
    assert got_y == {"best_loss": saved["y"][0], "best_iteration": saved["y"][1]}
    probes = {label: json.loads((tmp_path / f"{label}.json").read_text()) for label in ("a", "b")}
    assert probes["a"]["resumed_with"] == {"seen": 4} and probes["a"]["seen"] == 6
    assert probes["b"]["resumed_with"] == {"seen": 2} and probes["b"]["seen"] == 3
    # the overall validation is one of the sets: valid_loss beside its best, through the same path
    _, evals = read_metrics(tmp_path / "logs" / "metrics.jsonl")
    assert [r["iteration"] for r in evals if "valid_loss" in r] == [2, 4, 6]
    assert all(r["valid_best_loss"] <= r["valid_loss"] for r in evals if "valid_loss" in r)


def test_two_stateful_callbacks_under_one_state_key_are_refused_naming_the_fix(tmp_path):
    keyed = by_state_key([Probe("o", "a"), Probe("o", "b"), StopRequestsCallback(CheckpointConfig()),
                          StopRequestsCallback(CheckpointConfig())])  # stateless duplicates are fine
    assert sorted(keyed) == ["probe:a", "probe:b"]
    with pytest.raises(BloomstackError, match=r"^callbacks: tests\.bloomtrain\.callback_probe:Probe and Probe "
                                              r"both keep their checkpoint state under state_key 'probe:a'; "
                                              r"override the state_key property of Probe"):
        by_state_key([Probe("o", "a"), Probe("o2", "a")])
