"""tokenizer_flow and dataset_flow on a 3-language slice of the demo corpus, on the shared Prefect server (local
files, and the same files on s3:// through a local S3 server).

Checks the real outputs (a tokenizer that round-trips, per-language .bin/.idx whose token counts match a
direct encode), the artifacts, the stage skip on rerun and the rebuild when the tokenizer changes.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from bloomdata.build import BuildConfig
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.bpe import TokenizerTrainConfig, load_tokenizer
from flows.blend import blend_flow
from flows.config import BlendStageConfig
from flows.data import dataset_flow, tokenizer_flow
from tests.flows.prefect_api import artifact

pytestmark = pytest.mark.integration  # tests/tiers.py

CORPUS = Path(__file__).parents[2] / "flows" / "demo_corpus"
LANGS = ("en", "zh", "yo")


def _sources() -> list[SourceConfig]:
    return [SourceConfig(paths=[str(CORPUS / f"{lang}.jsonl.gz")], lang=lang) for lang in LANGS]


def _texts(lang: str) -> list[str]:
    with gzip.open(CORPUS / f"{lang}.jsonl.gz", "rt") as f:
        return [json.loads(line)["text"] for line in f]


def test_tokenizer_then_dataset(prefect_harness, tmp_path, dask_address):
    tok_cfg = TokenizerTrainConfig(sources=_sources(), out_dir=str(tmp_path / "tok"), vocab_size=400,
                                   byte_budget=150_000, min_frequency=2, show_progress=False)
    tok = tokenizer_flow(tok_cfg, fertility_docs_per_lang=50)
    tokenizer = load_tokenizer(tok.result.tokenizer_dir)
    assert tok.result.report.vocab_size == tokenizer.get_vocab_size() <= 400
    assert tokenizer.decode(tokenizer.encode("Ẹ kú àárọ̀ 你好 hello").ids) == "Ẹ kú àárọ̀ 你好 hello"
    rows = {r.lang: r for r in tok.result.fertility}
    assert set(rows) == {*LANGS, "(all)"} and rows["en"].docs == 50
    table = json.loads(artifact("tokenizer-fertility").data)
    assert {r["language"] for r in table} == {*LANGS, "(all)"}

    build = BuildConfig(sources=_sources(), tokenizer=tok.result.tokenizer_dir, out_dir=str(tmp_path / "data"),
                        append_eod=True, scheduler=dask_address, progress=False)
    data = dataset_flow(build, upstream=[tok.key])
    for lang in LANGS:
        ds = IndexedDataset(str(tmp_path / "data" / lang))
        texts = _texts(lang)
        expected = sum(len(e.ids) + 1 for e in tokenizer.encode_batch(texts))  # + </s> per document
        assert ds.num_documents == len(texts) and ds.num_tokens == expected == data.result.outputs[lang].tokens
    table = json.loads(artifact("dataset-tokens").data)
    assert {r["language"]: r["tokens"] for r in table} == {k: v.tokens for k, v in data.result.outputs.items()}
    assert artifact("dataset-progress") is not None

    # blend_flow on those datasets: alpha=0 gives every language the same weight; the table shows it.
    prefixes = {k: v.prefix for k, v in data.result.outputs.items()}
    blend = blend_flow(prefixes, BlendStageConfig(alpha=0.0, token_budget=30_000, seq_length=32,
                                                  out_dir=str(tmp_path / "blend")), upstream=[data.key])
    spec = yaml.safe_load(Path(blend.result.blend_yaml).read_text())
    assert spec["token_budget"] == 30_000 and spec["split"] == "90,10,0"
    assert [d["weight"] for d in spec["datasets"]] == pytest.approx([1 / 3] * 3)
    rows = {r["language"]: r for r in json.loads(artifact("blend-weights").data)}
    for lang in LANGS:
        # tokens of the train split (90% of the documents), each drawn budget / 3
        assert 0.8 * data.result.outputs[lang].tokens < rows[lang]["tokens"] < data.result.outputs[lang].tokens
        assert rows[lang]["epochs"] == pytest.approx(10_000 / rows[lang]["tokens"], abs=1e-3)  # 3 decimals

    # Rerun: both stages are skipped (the tokenizer file is not rewritten).
    mtime = (tmp_path / "tok" / "tokenizer.json").stat().st_mtime_ns
    again = tokenizer_flow(tok_cfg, fertility_docs_per_lang=50)
    assert again.skipped and again.key == tok.key and again.result == tok.result
    assert (tmp_path / "tok" / "tokenizer.json").stat().st_mtime_ns == mtime
    assert dataset_flow(build, upstream=[tok.key]).key == data.key
    # A different upstream (a retrained tokenizer) rebuilds the datasets.
    rebuilt = dataset_flow(build, upstream=["another-tokenizer"])
    assert rebuilt.key != data.key and not rebuilt.skipped


def test_tokenizer_and_dataset_flows_read_s3(prefect_harness, tmp_path, dask_address):
    """The same flows on s3:// sources (moto's local S3 server, endpoint and a planted secret key in the environment):
    the tokenizer and the datasets are the local sources' bytes, a rerun skips both stages, and the secret is in no
    file the flows wrote."""
    import shutil

    from bloomdata.build import run_build
    from bloomdata.config_loader import derive
    from bloomdata.tokenizer.bpe import train_tokenizer
    from tests.harness.object_stores import PLANTED_SECRET, forget_filesystems, moto_server, s3_env, upload

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for lang in LANGS:
        shutil.copy(CORPUS / f"{lang}.jsonl.gz", corpus)
    remote = [SourceConfig(paths=[f"s3://corpus/demo/{lang}.jsonl.gz"], lang=lang) for lang in LANGS]

    def tok_config(sources, out):
        return TokenizerTrainConfig(sources=sources, out_dir=str(tmp_path / out), vocab_size=400,
                                    byte_budget=150_000, min_frequency=2, show_progress=False)

    with moto_server() as port, pytest.MonkeyPatch.context() as mp:
        for key, value in s3_env(port).items():
            mp.setenv(key, value)
        upload(port, "corpus", corpus, "demo")
        forget_filesystems()
        tok = tokenizer_flow(tok_config(remote, "tok"), fertility_docs_per_lang=20)
        build = BuildConfig(sources=remote, tokenizer=tok.result.tokenizer_dir, out_dir=str(tmp_path / "data"),
                            append_eod=True, scheduler=dask_address, progress=False)
        data = dataset_flow(build, upstream=[tok.key])
        assert tokenizer_flow(tok_config(remote, "tok"), fertility_docs_per_lang=20).skipped
        assert dataset_flow(build, upstream=[tok.key]).key == data.key
    forget_filesystems()
    local_tok = tmp_path / "tok-local"
    train_tokenizer(tok_config(_sources(), "tok-local"))
    assert (tmp_path / "tok" / "tokenizer.json").read_bytes() == (local_tok / "tokenizer.json").read_bytes()
    run_build(derive(build, sources=_sources(), out_dir=str(tmp_path / "data-local"), scheduler=None, workers=0))
    for lang in LANGS:
        assert data.result.outputs[lang].tokens > 1000
        for suffix in (".bin", ".idx"):
            assert (tmp_path / "data" / f"{lang}{suffix}").read_bytes() == \
                (tmp_path / "data-local" / f"{lang}{suffix}").read_bytes(), (lang, suffix)
    for path in (tmp_path / "tok", tmp_path / "data"):
        for file in path.rglob("*"):
            assert not file.is_file() or PLANTED_SECRET.encode() not in file.read_bytes(), file
