"""``bloomtrain mixture-search``: proxy-model mixture search (RegMix) over real per-language datasets.

The search logic runs against a stub trainer (``fake_proxy``: bits per byte from a known law of the weights,
``bpb = base - slope x log(w + 0.01)``, written as a real proxy result), one proxy at a time in this process;
one test trains real tiny proxies (the trainer, in child processes on a local Dask cluster) end to end, and
retrains a proxy whose result was lost, alone. Checked:

- the same seed gives the same mixtures (the prior first) and the same proposal; more proxies keep the first
  ones; another seed draws others;
- a search killed during a proxy resumes: the finished proxies are not trained again, and the result is the
  uninterrupted search's;
- floors, caps and the epoch cap at the budget hold for every proxy, the proposal and blend.yaml;
- weighting a language's bits per byte more moves weight to that language;
- a dataset without a validation split is a one-line error of the command;
- the vectorized bound projection is ``water_fill``'s rule;
- the Slurm array script runs every pending proxy (under a fake ``sbatch``).
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from bloomdata.blend.spec import load_blend_spec
from bloomdata.blend.weights import water_fill
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDatasetWriter
from bloomtrain.config import load_config
from bloomtrain.data import build_datasets
from bloomtrain.mixture_search.config import MixtureSearchConfig
from bloomtrain.mixture_search.proxy import RESULT, ProxyResult, finished, read_job
from bloomtrain.mixture_search.run import run_search
from bloomtrain.mixture_search.space import within_bounds
from tests.bloomtrain.mixture_stub import SEED_EFFECT, stub_proxy, write_datasets

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "configs" / "train" / "tiny-cpu.yaml"
DOCS = {"fr": 60, "sw": 40, "zh": 50, "yo": 24}  # unequal, so the prior is skewed
CALLS: list[str] = []  # proxies the stub trained, in order


def fake_proxy(path: str) -> ProxyResult:
    """The stub trainer (tests/bloomtrain/mixture_stub.py), counting its calls."""
    CALLS.append(path)
    stub_proxy(path)
    result = finished(path, read_job(path))
    assert result is not None
    return result


def killed_after(n: int):
    def trainer(path: str) -> object:
        if len(CALLS) >= n:
            raise BloomstackError("killed")
        return fake_proxy(path)
    return trainer


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict[str, Path]:
    """A tokenizer and one Megatron dataset per language (tests/data/corpus), EOD after every document."""
    return write_datasets(tmp_path_factory.mktemp("mixture"), DOCS)


def _config(demo, out: Path, **fields) -> MixtureSearchConfig:
    base = {"datasets_dir": str(demo["data"]), "tokenizer": str(demo["tokenizer"]), "out_dir": str(out),
            "proxies": 8, "candidates": 2000, "top_k": 20, "workers": 0, "progress": False}
    return MixtureSearchConfig.model_validate({**base, **fields})


def _search(demo, out: Path, trainer=fake_proxy, **fields):
    CALLS.clear()
    return run_search(_config(demo, out, **fields), trainer=trainer)


def test_same_seed_same_mixtures_and_proposal(demo, tmp_path):
    a = _search(demo, tmp_path / "a", seed=3)
    b = _search(demo, tmp_path / "b", seed=3)
    assert [p.weights for p in a.proxies] == [p.weights for p in b.proxies]
    assert a.proposal == b.proposal and a.fit == b.fit
    prior = {d.name: d.prior for d in a.datasets}
    assert a.proxies[0].name == "prior" and a.proxies[0].weights == pytest.approx(prior, abs=1e-12)
    assert prior["fr"] > prior["yo"]  # tokens ** 0.3: the larger language weighs more
    more = _search(demo, tmp_path / "c", seed=3, proxies=10)
    assert [p.weights for p in more.proxies[:8]] == [p.weights for p in a.proxies]
    other = _search(demo, tmp_path / "d", seed=4)
    assert [p.weights for p in other.proxies[1:]] != [p.weights for p in a.proxies[1:]]
    # the stub's law is log-linear in the weights: the fits order held-out proxies right
    assert a.fit["linear"].spearman > 0.7 and -1 <= a.fit["lightgbm"].spearman <= 1, a.fit
    # the proposal beats the prior on the stub's own law (uniform is its optimum)
    assert a.proposal.predicted.objective < a.proxies[0].objective
    saved = json.loads((tmp_path / "a" / "search.json").read_text())
    assert set(saved["proxies"][0]) >= {"weights", "bpb", "objective"}
    assert set(saved["fit"]["lightgbm"]) >= {"spearman", "mae"} and set(saved["proposal"]) >= {"weights", "predicted"}
    spec = load_blend_spec(tmp_path / "a" / "blend.yaml")
    assert {d.name: d.weight for d in spec.datasets} == pytest.approx(a.proposal.weights)
    assert spec.split == "90,10,0" and (tmp_path / "a" / "search.png").stat().st_size > 0


def test_a_killed_search_resumes_with_the_finished_proxies(demo, tmp_path):
    with pytest.raises(BloomstackError, match="killed"):
        _search(demo, tmp_path / "run", trainer=killed_after(3))
    finished = sorted(p.parent.name for p in (tmp_path / "run" / "proxies").glob(f"*/{RESULT}"))
    assert len(finished) == 3
    resumed = _search(demo, tmp_path / "run")
    assert len(CALLS) == 8 - 3 and not {Path(c).name for c in CALLS} & set(finished)
    whole = _search(demo, tmp_path / "whole")
    assert resumed.proposal == whole.proposal
    again = _search(demo, tmp_path / "run")
    assert CALLS == [] and again.proposal == whole.proposal


def test_bounds_and_epoch_caps_hold(demo, tmp_path):
    tokens = {d.name: d.tokens for d in _search(demo, tmp_path / "free").datasets}
    budget = 3 * sum(tokens.values())  # at most 4 epochs of each: yo (the smallest) is capped below its share
    result = _search(demo, tmp_path / "bounded", floor={"zh": 0.1}, cap=0.45, token_budget=budget, max_epochs=4,
                     prior_alpha=0.0, validate_proposal=True, validate_seeds=2)
    hi = {n: min(0.45, 4 * tokens[n] / budget) for n in tokens}
    assert hi["yo"] < 0.25  # the epoch cap binds where alpha 0 would give yo a quarter
    mixtures = [p.weights for p in result.proxies] + [result.proposal.weights]
    for w in mixtures:
        assert sum(w.values()) == pytest.approx(1.0)
        assert w["zh"] >= 0.1 - 1e-12 and all(w[n] <= hi[n] + 1e-12 for n in w)
    assert max(result.proposal.epochs.values()) <= 4 + 1e-9
    spec = load_blend_spec(tmp_path / "bounded" / "blend.yaml")
    assert spec.token_budget == budget and max(d.epochs for d in spec.datasets) <= 4 + 1e-3
    assert result.validation.seeds == [0, 1] and len(result.validation.prior.objectives) == 2
    assert result.validation.prior.spread == pytest.approx(SEED_EFFECT)  # the stub's seed effect


def test_objective_weights_move_the_proposal(demo, tmp_path):
    mean = _search(demo, tmp_path)
    sw = _search(demo, tmp_path, objective="weighted", objective_weights={"sw": 6.0})
    assert sw.objective_weights["sw"] == pytest.approx(6 / 9)
    assert sw.proposal.weights["sw"] > mean.proposal.weights["sw"] + 0.1
    assert len(CALLS) == 0  # the objective is not part of a proxy: every proxy was reused


def test_a_dataset_without_a_validation_split_is_one_line(demo, tmp_path, capsys):
    from bloomtrain.cli import main

    tiny = tmp_path / "tiny"
    with IndexedDatasetWriter(tiny, dtype=np.uint16) as w:
        for _ in range(4):
            w.add_document([5, 6, 7, 2])
    argv = ["mixture-search", "--datasets-dir", str(demo["data"]), "--dataset", f"tiny={tiny}",
            "--tokenizer", str(demo["tokenizer"]), "--out", str(tmp_path / "out"), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("bloomtrain mixture-search: error: dataset tiny") and "--split" in err


def test_bounds_projection_is_water_fill():
    rng = np.random.default_rng(0)
    for _ in range(300):
        d = int(rng.integers(2, 7))
        lo = rng.uniform(0, 0.1, d) * (rng.random(d) < 0.5)
        hi = np.maximum(np.minimum(1.0, rng.uniform(0.05, 0.8, d)), lo)
        if lo.sum() > 1 or hi.sum() < 1:
            continue
        w = rng.dirichlet(np.full(d, 0.3)) * (rng.random(d) < 0.8)
        ref = water_fill(dict(enumerate(w)), 1.0, dict(enumerate(lo)), dict(enumerate(hi)))
        np.testing.assert_allclose(within_bounds(w[None, :], lo, hi)[0], [ref[i] for i in range(d)], atol=1e-12)


FAKE_PYTHON = """#!/bin/bash
# plays `python -m bloomtrain.mixture_search.proxy DIR` on a node: the stub trainer instead
exec {python} {stub} "$@"
"""
FAKE_SBATCH = """#!/bin/bash
# plays `sbatch --wait SCRIPT`: every task of the array, one after the other, then the job's end
script="${@: -1}"
last=$(sed -n 's/^#SBATCH --array=0-\\([0-9]*\\).*/\\1/p' "$script")
echo "Submitted batch job 7"
for i in $(seq 0 "$last"); do SLURM_ARRAY_TASK_ID=$i SLURM_ARRAY_JOB_ID=7 bash "$script" || true; done
"""


def _executable(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_slurm_array_runs_the_pending_proxies(demo, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "sbatch", FAKE_SBATCH)
    stub = ROOT / "tests" / "bloomtrain" / "mixture_stub.py"
    python = _executable(tmp_path / "fake-python", FAKE_PYTHON.format(python=sys.executable, stub=stub))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(BloomstackError, match="killed"):
        _search(demo, tmp_path / "run", trainer=killed_after(2))
    result = _search(demo, tmp_path / "run", slurm=True, python=python, sbatch=["--partition=cpu"],
                     env=["PROXY_NOTE=a b"])
    script = (tmp_path / "run" / "proxies" / "array.sbatch").read_text()
    assert "#SBATCH --array=0-5\n" in script and "#SBATCH --partition=cpu\n" in script
    assert "#SBATCH --time=02:00:00\n" in script and "export PROXY_NOTE='a b'\n" in script
    assert len(result.proxies) == 8 and result.proposal == _search(demo, tmp_path / "whole").proposal


def test_real_proxies_end_to_end(demo, tmp_path):
    """Real tiny proxies (the trainer in child processes, two local Dask workers), validated; then one proxy's
    result is lost (a kill) and the rerun trains that proxy alone, to the same numbers."""
    out = tmp_path / "real"
    config = _config(demo, out, proxies=4, proxy_tokens=4096, valid_samples=4, workers=2, validate_proposal=True)
    CALLS.clear()
    result = run_search(config)
    assert [p.name for p in result.proxies] == ["prior", "p01", "p02", "p03"]
    for p in result.proxies:
        assert set(p.bpb) == set(DOCS) and all(0 < v < 20 for v in p.bpb.values())
    v = result.validation
    assert v.prior.objective == result.proxies[0].objective  # the same job: the search's prior proxy, reused
    assert set(v.proposal.bpb) == set(DOCS) and math.isfinite(v.proposal.objective)
    job = yaml.safe_load((out / "proxies" / result.proxies[0].key / "blend.yaml").read_text())
    assert job["split"] == "90,10,0" and len(job["datasets"]) == 4
    # the proposal is a blend the trainer reads as it is (data.blend), its samples drawn in the proposed shares
    cfg = load_config(TINY, ["data.kind=blend", f"data.blend={result.blend_yaml}", f"data.cache_dir={tmp_path}",
                             "schedule.train_iters=50", "logging.eval_interval=10"])
    train, valid = build_datasets(cfg)
    assert len(train) >= 50 * cfg.schedule.global_batch_size and valid is not None
    lost = out / "proxies" / result.proxies[2].key / RESULT
    kept = {p.key: (out / "proxies" / p.key / RESULT).stat().st_mtime_ns for p in result.proxies
            if p.key != lost.parent.name}
    lost.unlink()
    again = run_search(config.model_copy(update={"workers": 0}))
    assert {k: (out / "proxies" / k / RESULT).stat().st_mtime_ns for k in kept} == kept
    assert again.proxies[2].bpb == result.proxies[2].bpb  # deterministic: same mixture, tokens and seed
    assert (out / "proxies" / lost.parent.name / "train.log").read_text().count("=== proxy attempt") == 2
