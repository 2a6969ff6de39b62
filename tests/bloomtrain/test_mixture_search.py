"""``bloomtrain mixture-search``: proxy-model mixture search (RegMix) over real per-language datasets.

The search logic runs against stub trainers (bits per byte from a known law of the weights, written as a real
proxy result), one proxy at a time in this process: ``fake_proxy``, ``bpb = base - slope x log(w + 0.01)``
(tests/bloomtrain/mixture_stub.py), and ``Law``, a blend-quality function with an overfitting term whose
optimum within the bounds is known (solved here with SLSQP). One test trains real tiny proxies (the trainer, in
child processes on a local Dask cluster) end to end, and retrains a proxy whose result was lost, alone. Checked:

- the same seed gives the same mixtures (the prior first) and the same proposal; more proxies keep the first
  ones; another seed draws others;
- a search killed during a proxy resumes: the finished proxies are not trained again, and the result is the
  uninterrupted search's;
- floors, caps and the epoch cap (at the budget, else at the proxies' tokens) hold for every proxy, the
  proposal and blend.yaml; the design spreads over the capped region;
- on the overfitting law the search lands within a stated distance of the true optimum; where the prior is the
  optimum it keeps the prior; a win below the seed spread is a tie; blend.yaml is never a mixture measured worse;
- weighting a language's bits per byte more moves weight to that language;
- a dataset without a validation split, or too little data for the epoch cap, is a one-line error of the command;
- the vectorized bound projection is ``water_fill``'s rule; uniform draws and the design stay within bounds;
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
from bloomdata.config_loader import derive
from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import IndexedDatasetWriter
from bloomtrain.config import load_config
from bloomtrain.data import build_datasets
from bloomtrain.mixture_search.config import MixtureSearchConfig
from bloomtrain.mixture_search.fit import fit_power
from bloomtrain.mixture_search.proxy import RESULT, ProxyResult, finish, finished, read_job
from bloomtrain.mixture_search.run import run_search
from bloomtrain.mixture_search.space import herd, search_space, uniform_in_bounds, within_bounds
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
    # 100k proxy tokens: ~1.5 epochs of the 65k training tokens; the 4-epoch cap binds for yo (0.35) and sw
    base = {"datasets_dir": str(demo["data"]), "tokenizer": str(demo["tokenizer"]), "out_dir": str(out),
            "proxies": 8, "proxy_tokens": 100_000, "candidates": 2000, "top_k": 20, "workers": 0, "progress": False}
    return MixtureSearchConfig.model_validate({**base, **fields})


def _search(demo, out: Path, trainer=fake_proxy, **fields):
    CALLS.clear()
    return run_search(_config(demo, out, **fields), trainer=trainer)


def test_same_seed_same_mixtures_and_proposal(demo, tmp_path):
    a = _search(demo, tmp_path / "a", seed=3, prior_alpha=1.0)  # natural proportions: far from the stub's optimum
    b = _search(demo, tmp_path / "b", seed=3, prior_alpha=1.0)
    assert [p.weights for p in a.proxies] == [p.weights for p in b.proxies]
    assert a.proposal == b.proposal and a.fit == b.fit and a.choice == b.choice
    prior = {d.name: d.prior for d in a.datasets}
    assert a.proxies[0].name == "prior" and a.proxies[0].weights == pytest.approx(prior, abs=1e-12)
    assert prior["fr"] > prior["yo"]  # tokens ** 1: the larger language weighs more
    more = _search(demo, tmp_path / "c", seed=3, prior_alpha=1.0, proxies=10)
    assert [p.weights for p in more.proxies[:8]] == [p.weights for p in a.proxies]
    other = _search(demo, tmp_path / "d", seed=4, prior_alpha=1.0)
    assert [p.weights for p in other.proxies[1:]] != [p.weights for p in a.proxies[1:]]
    # the stub's law is log-linear in the weights: a fit orders held-out proxies right, and auto picks it (of
    # the power law and the ridge: LightGBM joins only from 64 proxies)
    assert a.fit[a.selected].spearman == max(a.fit["power"].spearman, a.fit["linear"].spearman) > 0.8, a.fit
    assert all(-1 <= f.spearman <= 1 and f.mae >= 0 for f in a.fit.values())
    # the proposal beats the prior on the stub's own law (uniform is its optimum), predicted and measured
    assert a.proposal.better_than_prior and a.proposal.predicted.objective < a.proxies[0].objective
    assert a.validation.proposal.objective < a.validation.prior.objective and a.choice.source == "proposal"
    assert a.choice.reason.startswith("blend.yaml holds the proposal: ") and "seed spread" in a.choice.reason
    saved = json.loads((tmp_path / "a" / "search.json").read_text())
    assert set(saved["proxies"][0]) >= {"weights", "bpb", "objective"}
    assert set(saved["fit"]["lightgbm"]) >= {"spearman", "mae"} and set(saved["proposal"]) >= {"weights", "predicted"}
    assert saved["choice"]["source"] == "proposal" and saved["choice"]["reason"] == a.choice.reason
    spec = load_blend_spec(tmp_path / "a" / "blend.yaml")
    assert {d.name: d.weight for d in spec.datasets} == pytest.approx(a.choice.weights)
    assert spec.split == "90,10,0" and (tmp_path / "a" / "search.png").stat().st_size > 0


def test_a_killed_search_resumes_with_the_finished_proxies(demo, tmp_path):
    with pytest.raises(BloomstackError, match="killed"):
        _search(demo, tmp_path / "run", trainer=killed_after(3))
    finished = sorted(p.parent.name for p in (tmp_path / "run" / "proxies").glob(f"*/{RESULT}"))
    assert len(finished) == 3
    resumed = _search(demo, tmp_path / "run")
    assert len(CALLS) >= 8 - 3 and not {Path(c).name for c in CALLS} & set(finished)
    whole = _search(demo, tmp_path / "whole")
    assert resumed.proposal == whole.proposal and resumed.choice == whole.choice
    again = _search(demo, tmp_path / "run")
    assert CALLS == [] and again.proposal == whole.proposal


def test_bounds_and_epoch_caps_hold(demo, tmp_path):
    free = _search(demo, tmp_path / "free")
    tokens = {d.name: d.tokens for d in free.datasets}
    # no budget: the epochs are counted at the proxies' 100k tokens, 4 at most by default
    assert free.epochs_budget == 100_000 and {d.name: d.hi for d in free.datasets} == pytest.approx(
        {n: min(1.0, 4 * t / 100_000) for n, t in tokens.items()})
    assert max(max(p.weights[n] * 100_000 / tokens[n] for n in tokens) for p in free.proxies) <= 4 + 1e-9
    assert max(free.proposal.epochs.values()) <= 4 + 1e-9 and max(free.choice.epochs.values()) <= 4 + 1e-9
    # two seeds by default, not the search's own (0)
    assert free.validation.seeds == [1, 2] and len(free.validation.prior.objectives) == 2
    assert free.validation.prior.spread == pytest.approx(SEED_EFFECT)  # the stub's seed effect
    budget = 3 * sum(tokens.values())  # at most 4 epochs of each: yo (the smallest) is capped below its share
    result = _search(demo, tmp_path / "bounded", floor={"zh": 0.1}, cap=0.45, token_budget=budget, max_epochs=4,
                     prior_alpha=0.0)
    hi = {n: min(0.45, 4 * tokens[n] / budget) for n in tokens}
    assert hi["yo"] < 0.25  # the epoch cap binds where alpha 0 would give yo a quarter
    mixtures = [p.weights for p in result.proxies] + [result.proposal.weights, result.choice.weights]
    for w in mixtures:
        assert sum(w.values()) == pytest.approx(1.0)
        assert w["zh"] >= 0.1 - 1e-12 and all(w[n] <= hi[n] + 1e-12 for n in w)
    assert max(result.proposal.epochs.values()) <= 4 + 1e-9
    spec = load_blend_spec(tmp_path / "bounded" / "blend.yaml")
    assert spec.token_budget == budget and max(d.epochs for d in spec.datasets) <= 4 + 1e-3
    table = (tmp_path / "bounded" / "search.md").read_text()
    yo = result.proposal.weights["yo"]
    assert f"epochs at {budget:,} tokens (the budget)" in table
    assert f"| {yo:.4f} ({yo * budget / tokens['yo']:.2f}) |" in table


def test_the_design_spreads_over_the_capped_region():
    """The issue's skewed set (en 27k tokens, five languages of 3-5k, 100k tokens per proxy): 8 proxies try each
    small language near its 4-epoch cap, few put most weight on en, and every draw is within the bounds."""
    tokens = np.array([27079, 4100, 3500, 4600, 3900, 3300.0])
    lo, hi = np.zeros(6), np.minimum(1.0, 4 * tokens / 100_000)
    prior = within_bounds((tokens / tokens.sum())[None, :], lo, hi)[0]
    pool = uniform_in_bounds(np.random.default_rng(0), prior, lo, hi, 2048)
    assert np.all(pool >= lo - 1e-12) and np.all(pool <= hi + 1e-12)
    np.testing.assert_allclose(pool.sum(1), 1.0)
    design = herd(pool, prior, 7, lo, hi)
    assert np.all(design[1:, 1:].max(0) >= 0.75 * hi[1:])  # every small language tried near its cap
    assert np.all(design[1:, 1:].min(0) <= 0.25 * hi[1:])  # and starved
    assert (design[:, 0] > 0.76).sum() <= 1  # RegMix's draws put three of eight there
    np.testing.assert_array_equal(herd(pool, prior, 3, lo, hi), design[:4])  # more proxies keep the first ones


BASE = {"fr": 1.0, "sw": 1.4, "zh": 2.2, "yo": 1.8}
GAIN = {"fr": 0.05, "sw": 0.2, "zh": 0.6, "yo": 0.4}


class Law:
    """A blend-quality function with an overfitting term, evaluated instead of training proxies: per dataset,
    ``bpb = BASE + GAIN / sqrt(w + 0.01) + 0.05 max(0, epochs - 1) ** 2`` (epochs at the proxy's tokens), or
    with ``bowl`` ``BASE + 5 (w - prior) ** 2`` (the prior is the optimum), or with ``flat`` ``BASE``; plus
    ``noise`` on odd seeds. Its optimum within the bounds: SLSQP from the prior and 20 random starts."""

    def __init__(self, config: MixtureSearchConfig, kind: str = "overfit", noise: float = 0.002):
        self.space = search_space(config)
        self.tokens = np.array([self.space.tokens[n] for n in self.space.names], dtype=float)
        self.kind, self.noise = kind, noise

    def bpb(self, w: np.ndarray, tokens: int) -> np.ndarray:
        base = np.array([BASE[n] for n in self.space.names])
        if self.kind == "bowl":
            return base + 5 * (w - self.space.prior) ** 2
        if self.kind == "flat":
            return base
        gain = np.array([GAIN[n] for n in self.space.names])
        return base + gain / np.sqrt(w + 0.01) + 0.05 * np.maximum(0.0, w * tokens / self.tokens - 1) ** 2

    def train(self, path: str) -> ProxyResult:
        CALLS.append(path)
        job = read_job(path)
        bpb = self.bpb(self.space.vector(job.weights), job.tokens) + self.noise * (job.seed % 2)
        return finish(path, job, self.space.weights(bpb), 0.0)

    def optimum(self, tokens: int) -> tuple[np.ndarray, float]:
        from scipy.optimize import minimize

        def objective(w: np.ndarray) -> float:
            return float(self.bpb(w, tokens).mean())

        lo, hi = self.space.lo, self.space.hi
        starts = [self.space.prior, *np.random.default_rng(0).dirichlet(np.ones(len(lo)), 20)]
        best = min((minimize(objective, within_bounds(x[None, :], lo, hi)[0], method="SLSQP",
                             bounds=list(zip(lo, hi)), constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1}])
                    for x in starts), key=lambda r: r.fun)
        return best.x, float(best.fun)


def _law_search(demo, out: Path, kind: str, noise: float = 0.002, **fields):
    config = _config(demo, out, **fields)
    law = Law(config, kind, noise)
    CALLS.clear()
    return law, run_search(config, trainer=law.train)


def test_the_search_recovers_the_known_optimum(demo, tmp_path):
    """16 proxies on the overfitting law: blend.yaml is within L1 distance 0.1 of the true optimum and
    realizes at least 90% of the prior-to-optimum gain; the prior itself is 0.4 away."""
    law, result = _law_search(demo, tmp_path, "overfit", proxies=16)
    tokens = read_job(tmp_path / "proxies" / result.proxies[0].key).tokens
    best, best_objective = law.optimum(tokens)
    prior_objective = float(law.bpb(law.space.prior, tokens).mean())
    written = law.space.vector({d.name: d.weight for d in load_blend_spec(tmp_path / "blend.yaml").datasets})
    assert np.abs(law.space.prior - best).sum() > 0.3  # the optimum is far from the prior: a real search
    assert best[law.space.names.index("yo")] < law.space.hi[law.space.names.index("yo")] - 0.05  # overfitting binds
    assert np.abs(written - best).sum() <= 0.1, (written, best)
    gained = prior_objective - float(law.bpb(written, tokens).mean())
    assert gained >= 0.9 * (prior_objective - best_objective)
    assert result.choice.source == "proposal" and not result.choice.tie


def test_the_prior_is_kept_when_every_candidate_is_worse(demo, tmp_path):
    """The prior is the bowl's optimum: 8 proxies propose something, validation measures it worse, the prior is
    written; on a flat law no candidate is predicted better, so nothing is validated at all."""
    law, result = _law_search(demo, tmp_path / "bowl", "bowl")
    assert result.validation is not None and result.validation.improvement < 0
    assert result.choice.source == "prior" and result.choice.objective == result.validation.prior.objective
    assert result.choice.reason.startswith("blend.yaml keeps the prior (") and "--proxies 16" in result.choice.reason
    assert load_blend_spec(tmp_path / "bowl" / "blend.yaml").weights == pytest.approx(list(law.space.prior))
    _, flat = _law_search(demo, tmp_path / "flat", "flat")
    assert flat.validation is None and not flat.proposal.better_than_prior and len(CALLS) == 8
    assert flat.choice.source == "prior" and "nothing was validated" in flat.choice.reason
    assert "Not validated (the proposal is not predicted better than the prior)" in (
        tmp_path / "flat" / "search.md").read_text()


def test_a_win_below_the_seed_spread_is_a_tie(demo, tmp_path):
    _, result = _law_search(demo, tmp_path, "overfit", proxies=16, noise=0.2)
    v = result.validation
    assert v.spread == pytest.approx(0.2) and 0 < v.improvement < v.spread and v.tie
    assert result.choice.source == "proposal" and result.choice.tie  # the best measured, reported as a tie
    assert "but it is a tie" in result.choice.reason and "--validate-seeds 4" in result.choice.reason


def test_the_power_fit_sees_overfitting():
    """Loss that falls, then rises with a dataset's weight (its epochs): the fit's prediction does too."""
    w = np.linspace(0.02, 0.98, 12)
    weights = np.stack([w, 1 - w], axis=1)
    scale = np.array([20.0, 1.0])  # dataset 0 is small: 20 epochs at full weight
    y = 1 + 0.2 / np.sqrt(weights + 0.01) + 0.02 * np.maximum(0, weights * scale - 2) ** 2
    predict = fit_power(weights, y, scale)
    grid = np.linspace(0.01, 0.99, 99)
    curve = predict(np.stack([grid, 1 - grid], axis=1))[:, 0]
    assert 0.05 < grid[np.argmin(curve)] < 0.4 and curve[-1] > curve.min() + 0.1


def test_objective_weights_move_the_proposal(demo, tmp_path):
    mean = _search(demo, tmp_path)
    sw = _search(demo, tmp_path, objective="weighted", objective_weights={"sw": 6.0})
    assert sw.objective_weights["sw"] == pytest.approx(6 / 9)
    assert sw.proposal.weights["sw"] > mean.proposal.weights["sw"] + 0.1
    # the objective is not part of a proxy: every proxy was reused, only the new proposal's validation trained
    assert CALLS and not {Path(c).name for c in CALLS} & {p.key for p in sw.proxies}


def test_a_dataset_without_a_validation_split_is_one_line(demo, tmp_path, capsys):
    from bloomtrain.cli import main

    tiny = tmp_path / "tiny"
    with IndexedDatasetWriter(tiny, dtype=np.uint16) as w:
        for _ in range(4):
            w.add_document([5, 6, 7, 2])
    argv = ["mixture-search", "--datasets-dir", str(demo["data"]), "--dataset", f"tiny={tiny}",
            "--tokenizer", str(demo["tokenizer"]), "--out", str(tmp_path / "out"), "--no-progress"]
    assert main([*argv, "--proxy-tokens", "1e5"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("bloomtrain mixture-search: error: dataset tiny") and "--split" in err
    # the default 600k tokens per proxy would repeat the 65k training tokens 9 times: more than 4 epochs each
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith("bloomtrain mixture-search: error: 600,000 tokens per proxy") and "--max-epochs" in err
    assert "lower --proxy-tokens to " in err


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


@pytest.mark.integration  # a fake sbatch and python on PATH, run by bloomtrain.mixture_search.slurm
def test_slurm_array_runs_the_pending_proxies(demo, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "sbatch", FAKE_SBATCH)
    stub = ROOT / "tests" / "bloomtrain" / "mixture_stub.py"
    python = _executable(tmp_path / "fake-python", FAKE_PYTHON.format(python=sys.executable, stub=stub))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(BloomstackError, match="killed"):
        _search(demo, tmp_path / "run", trainer=killed_after(2))
    # --no-validate: the array holds the search's pending proxies only (validation would be a second array)
    result = _search(demo, tmp_path / "run", slurm=True, python=python, sbatch=["--partition=cpu"],
                     env=["PROXY_NOTE=a b"], validate_proposal=False)
    script = (tmp_path / "run" / "proxies" / "array.sbatch").read_text()
    assert "#SBATCH --array=0-5\n" in script and "#SBATCH --partition=cpu\n" in script
    assert "#SBATCH --time=02:00:00\n" in script and "export PROXY_NOTE='a b'\n" in script
    assert len(result.proxies) == 8 and result.proposal == _search(demo, tmp_path / "whole").proposal
    assert result.validation is None and not result.choice.measured and "--no-validate" in result.choice.reason


# the trainer in child processes (bloomtrain.mixture_search.proxy), beyond tests/tiers.py's sight
@pytest.mark.integration
def test_real_proxies_end_to_end(demo, tmp_path):
    """Real tiny proxies (the trainer in child processes, two local Dask workers), validated on two seeds: the
    written blend's validated objective is at most the prior's. Then one proxy's result is lost (a kill) and the
    rerun trains that proxy alone, to the same numbers."""
    out = tmp_path / "real"
    config = _config(demo, out, proxies=4, proxy_tokens=4096, valid_samples=4, workers=2)
    CALLS.clear()
    result = run_search(config)
    assert [p.name for p in result.proxies] == ["prior", "p01", "p02", "p03"]
    for p in result.proxies:
        assert set(p.bpb) == set(DOCS) and all(0 < v < 20 for v in p.bpb.values())
    v = result.validation
    assert v is not None and v.seeds == [1, 2], result.choice.reason  # the gate opened: a proposal was validated
    assert v.prior.spread > 0 and set(v.proposal.bpb) == set(DOCS) and math.isfinite(v.proposal.objective)
    finalists = {m.name: m.objective for m in (v.prior, v.proposal, v.proxy) if m is not None}
    assert result.choice.objective == min(finalists.values()) <= v.prior.objective
    written = {d.name: d.weight for d in load_blend_spec(result.blend_yaml).datasets}
    assert written == pytest.approx(result.choice.weights)
    job = yaml.safe_load((out / "proxies" / result.proxies[0].key / "blend.yaml").read_text())
    assert job["split"] == "90,10,0" and len(job["datasets"]) == 4
    # blend.yaml is a blend the trainer reads as it is (data.blend), its samples drawn in the chosen shares
    cfg = load_config(TINY, ["data.kind=blend", f"data.blend={result.blend_yaml}", f"data.cache_dir={tmp_path}",
                             "schedule.train_iters=50", "logging.eval_interval=10"])
    train, valid = build_datasets(cfg)
    assert len(train) >= 50 * cfg.schedule.global_batch_size and valid is not None
    lost = out / "proxies" / result.proxies[2].key / RESULT
    kept = {p.key: (out / "proxies" / p.key / RESULT).stat().st_mtime_ns for p in result.proxies
            if p.key != lost.parent.name}
    lost.unlink()
    again = run_search(derive(config, workers=0))
    assert {k: (out / "proxies" / k / RESULT).stat().st_mtime_ns for k in kept} == kept
    assert again.proxies[2].bpb == result.proxies[2].bpb  # deterministic: same mixture, tokens and seed
    assert (out / "proxies" / lost.parent.name / "train.log").read_text().count("=== proxy attempt") == 2
    assert again.choice == result.choice
