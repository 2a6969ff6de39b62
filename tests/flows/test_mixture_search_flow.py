"""``mixture_search_flow`` and the pipeline's mixture search: the library's search as a stage, its artifacts, its
skip on a rerun, and the blend stage weighed by its proposal.

Proxies are the stub trainer of tests/bloomtrain/mixture_stub.py (bits per byte from a known law of the
weights), put in place of ``run_proxy`` in this process; tests/bloomtrain/test_mixture_search.py trains real
ones. The pipeline part runs the real tokenizer and build on three demo languages.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prefect import flow

from bloomdata.blend.spec import load_blend_spec
from bloomdata.config_loader import derive
from bloomdata.readers import SourceConfig
from bloomtrain.mixture_search import runner
from flows.config import DEMO_CORPUS, MixtureSearchStageConfig, PipelineConfig
from flows.mixture_search import mixture_search_flow
from flows.pipeline import blend_stage, data_stages, search_stage, training_tokens
from flows.results import MixtureSearchResult
from flows.stages import read_marker
from tests.bloomtrain.mixture_stub import stub_proxy, write_datasets
from tests.flows.prefect_api import artifact

CALLS: list[str] = []


def _stub(path: str, threads: int = 1):
    CALLS.append(path)
    stub_proxy(path)
    return runner.finished(path, runner.read_job(path))


@pytest.fixture
def stub_proxies(monkeypatch):
    CALLS.clear()
    monkeypatch.setattr(runner, "run_proxy", _stub)


def _search_config(**fields) -> MixtureSearchStageConfig:
    # 50k tokens per proxy: the 4-epoch cap (at the proxies' tokens, no budget) leaves room on 90 documents
    return MixtureSearchStageConfig.model_validate({"proxies": 6, "proxy_tokens": 50_000, "candidates": 1000,
                                                    "top_k": 10, "workers": 0, **fields})


@pytest.mark.integration
def test_mixture_search_flow(prefect_harness, stub_proxies, tmp_path):
    data = write_datasets(tmp_path, {"fr": 40, "sw": 30, "yo": 20})
    config = _search_config(datasets_dir=str(data["data"]), tokenizer=str(data["tokenizer"]),
                            out_dir=str(tmp_path / "search"))
    result = mixture_search_flow(config)
    search = result.result
    v = search.validation
    assert type(result) is MixtureSearchResult and not result.skipped and v is not None  # validated by default
    # 6 proxies, then seeds 1 and 2 of the prior, the proposal (and the best proxy)
    trained = len(CALLS)
    assert trained == 6 + 2 * (2 + (v.proxy is not None))
    assert [p.name for p in search.proxies][:2] == ["prior", "p01"]
    assert load_blend_spec(search.blend_yaml).weights == pytest.approx(list(search.choice.weights.values()))
    assert json.loads((tmp_path / "search" / "search.json").read_text())["choice"]["weights"] == \
        search.choice.weights
    rows = json.loads(artifact("mixture-search-proxies").data)
    assert [r["mixture"] for r in rows][:2] == ["prior", "p01"]
    assert rows[-1]["mixture"].startswith("blend.yaml: ")
    assert "prior (validated, seeds [1, 2])" in [r["mixture"] for r in rows]
    assert search.choice.reason in artifact("mixture-search").data
    assert "data:image/png;base64," in artifact("mixture-search").data
    again = mixture_search_flow(derive(config, workers=2))  # where proxies run is not in the key
    assert again.skipped and again.result == search and len(CALLS) == trained


@pytest.mark.integration
def test_pipeline_blend_takes_the_search_proposal(prefect_harness, stub_proxies, tmp_path):
    corpus = [SourceConfig(paths=[str(DEMO_CORPUS / f"{lang}.jsonl.gz")], lang=lang) for lang in ("en", "fr", "yo")]
    config = PipelineConfig(out_dir=str(tmp_path / "run"), corpus=corpus, clean=None, fertility_docs_per_lang=5,
                            mixture_search=_search_config(proxies=5))
    config.tokenizer = derive(config.tokenizer, vocab_size=320, byte_budget=120_000)
    config.dataset = derive(config.dataset, workers=0)
    # the demo's training repeats these three languages ~6 times: the search's epoch cap is the blend's
    config.blend = derive(config.blend, cap=0.6, max_epochs=10.0)
    root = tmp_path / "run"

    @flow
    def until_blend():
        _, tok, data = data_stages(config, root)
        search = search_stage(config, tok, data, root)
        return search, blend_stage(config, data, root, search)

    search, blend = until_blend()
    proposal = search.result.choice.weights  # what the search wrote: the best measured mixture
    assert set(proposal) == {"en", "fr", "yo"} and max(proposal.values()) <= 0.6 + 1e-12  # the blend's own cap
    assert search.result.token_budget == training_tokens(config.train) and Path(search.out_dir) == root / "search"
    spec = blend.result.spec
    assert {d.name: d.weight for d in spec.datasets} == pytest.approx(proposal)
    assert spec.split == "90,10,0" and spec.token_budget == training_tokens(config.train)
    assert read_marker(root / "blend").config["overrides"] == proposal


def test_the_search_stage_keys_the_datasets_the_search_reads(tmp_path):
    """``input_files`` lists the datasets as ``bloomdata.blend.tune.named_datasets`` does for the blend and the
    search: a named one, then each dataset of datasets_dir not named (one .bin and .idx each)."""
    from bloomdata.blend.tune import named_datasets
    from bloomtrain.mixture_search.config import MixtureSearchConfig
    from flows.mixture_search import input_files

    made = write_datasets(tmp_path, {"en": 5, "fr": 5})
    config = MixtureSearchConfig(datasets={"fr": str(made["data"] / "fr")}, datasets_dir=str(made["data"]),
                                 tokenizer=str(made["tokenizer"]), out_dir=str(tmp_path / "out"), split="80,20,0")
    named = named_datasets(config.datasets, config.datasets_dir)
    assert named == {"fr": str(made["data"] / "fr"), "en": str(made["data"] / "en")}
    files = input_files(config)
    assert files[:4] == [f"{p}.{ext}" for p in named.values() for ext in ("idx", "bin")]
    assert files[4] == str(made["tokenizer"] / "tokenizer.json")
