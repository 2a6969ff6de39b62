"""evaluate_flow on its own: a bloomdata tokenizer, per-language datasets and a blend built from a 3-language
slice of the demo corpus, and two tiny random BLOOMs saved with that tokenizer (no training: the pipeline
test covers the trained, exported model).

The held-out documents are checked against the corpus itself: for each language, exactly the corpus
documents of the blend's validation range, in order, none of the training range. The scores are checked
against a plain transformers loop, and the stage's skip, artifacts and one-line failure messages.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest
import torch

from bloomdata.blend.report import write_blend
from bloomdata.blend.tune import BlendConfig, tune_blend
from bloomdata.build import BuildConfig, run_build
from bloomdata.megatron.splits import split_range
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.bpe import TokenizerTrainConfig, train_tokenizer
from bloomtrain.card import CARD_FILE
from bloomtrain.hf_import import copy_tokenizer_files
from flows.config import DEMO_CORPUS, EvaluateStageConfig
from flows.evaluate import evaluate_flow
from flows.stages import MARKER
from tests.bloomtrain.conftest import build_hf_bloom
from tests.flows.prefect_api import artifact

pytestmark = pytest.mark.integration  # tests/tiers.py

LANGS = ("en", "fr", "yo")
SPLIT = "80,20,0"


def _texts(lang: str) -> list[str]:
    with gzip.open(DEMO_CORPUS / f"{lang}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """tokenizer/, data/<lang>.bin/.idx, blend/blend.yaml (split 80,20,0), hf-a/ and hf-b/ (random BLOOMs)."""
    root = tmp_path_factory.mktemp("evaluate")
    sources = [SourceConfig(paths=[str(DEMO_CORPUS / f"{lang}.jsonl.gz")], lang=lang) for lang in LANGS]
    train_tokenizer(TokenizerTrainConfig(sources=sources, out_dir=str(root / "tok"), vocab_size=320,
                                         byte_budget=120_000, show_progress=False))
    build = run_build(BuildConfig(sources=sources, tokenizer=str(root / "tok"), out_dir=str(root / "data"),
                                  workers=0, progress=False))
    prefixes = {name: o.prefix for name, o in build.outputs.items()}
    blend = BlendConfig(datasets=prefixes, split=SPLIT, token_budget=10_000, seq_length=32, out_dir=str(root / "blend"))
    write_blend(tune_blend(blend), blend.out_dir, blend.max_epochs)
    for name, seed in (("hf-a", 0), ("hf-b", 1)):
        build_hf_bloom(n_head=4, n_layer=2, hidden=32, vocab=384, seed=seed).save_pretrained(root / name)
        copy_tokenizer_files(root / "tok", root / name)
    return root


def _config(root: Path, out: Path, **update) -> EvaluateStageConfig:
    fields = {"models": [f"mine={root / 'hf-a'}"], "reference_models": [f"ref={root / 'hf-b'}"],
              "blend": str(root / "blend" / "blend.yaml"), "tokenizer": str(root / "tok"), "context": 4096,
              "batch_size": 4, "device": "cpu", "out_dir": str(out)}
    return EvaluateStageConfig(**{**fields, **update})


def _reference_bpb(model_dir: Path, texts: list[str]) -> float:
    """A plain transformers loop: [</s>] + tokens, one forward per document, log-softmax at every position."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    nll = 0.0
    for text in texts:
        seq = [tok.convert_tokens_to_ids("</s>"), *tok(text, add_special_tokens=False)["input_ids"]]
        with torch.no_grad():
            logp = model(torch.tensor([seq])).logits[0].log_softmax(-1)
        nll -= float(logp[torch.arange(len(seq) - 1), torch.tensor(seq[1:])].sum(dtype=torch.float64))
    return nll / (math.log(2) * sum(len(t.encode("utf-8")) for t in texts))


def test_scores_exactly_the_validation_documents(prefect_harness, built, tmp_path):
    out = tmp_path / "eval"
    result = evaluate_flow(_config(built, out))
    report = json.loads((out / "eval.json").read_text())
    assert list(report["models"]) == ["mine", "ref"]
    heldout = result.result.heldout
    assert [h.name for h in heldout] == list(LANGS)
    for h in heldout:
        corpus = _texts(h.name)  # the build keeps every demo document, in file order
        begin, end = split_range(SPLIT, "valid", len(corpus), "core")
        train_end = split_range(SPLIT, "train", len(corpus), "core")[1]
        assert h.valid_range == (begin, end) and begin == train_end > 0 and end == len(corpus)
        rows = [json.loads(line) for line in Path(h.path).read_text(encoding="utf-8").splitlines()]
        assert [r["doc"] for r in rows] == list(range(begin, end))
        assert [r["text"] for r in rows] == corpus[begin:end]  # decoded from the dataset: the corpus text itself
        assert not {r["text"] for r in rows} & set(corpus[:train_end])  # nothing of the training range
        score = report["models"]["mine"]["languages"][h.name]
        assert score["docs"] == end - begin
        assert score["bytes"] == sum(len(t.encode("utf-8")) for t in corpus[begin:end])
    yo = [json.loads(line)["text"] for line in (out / "heldout" / "yo.jsonl").read_text().splitlines()]
    for name, model_dir in (("mine", built / "hf-a"), ("ref", built / "hf-b")):
        assert report["models"][name]["languages"]["yo"]["bpb"] == pytest.approx(_reference_bpb(model_dir, yo),
                                                                                 rel=1e-5)
    assert {m: r.model_dump() for m, r in result.result.models.items()} == report["models"]

    table = json.loads(artifact("evaluation-bpb").data)
    assert [r["language"] for r in table] == [*LANGS, "overall"]
    en = report["models"]["ref"]["languages"]["en"]
    assert table[0]["ref bpb"] == round(en["bpb"], 4) and table[0]["ref ppl"] == round(en["ppl"], 2)
    chart = artifact("evaluation-chart").data
    assert "data:image/png;base64," in chart and "mine" in chart and "[" in chart

    stamp = (out / MARKER).stat().st_mtime_ns
    again = evaluate_flow(_config(built, out))  # same config and inputs: skipped
    assert again.skipped and again.result == result.result and (out / MARKER).stat().st_mtime_ns == stamp
    (built / "hf-a" / CARD_FILE).write_text("a rebuilt model card")  # the model's card changed, not the model
    assert evaluate_flow(_config(built, out)).skipped
    (built / "hf-b" / "config.json").touch()  # a reference model changed: scored again
    evaluate_flow(_config(built, out))
    assert (out / MARKER).stat().st_mtime_ns != stamp


def test_sources_replace_the_validation_documents(prefect_harness, built, tmp_path):
    doc = tmp_path / "sw.jsonl"
    doc.write_text(json.dumps({"text": "Habari ya asubuhi."}) + "\n")
    result = evaluate_flow(_config(built, tmp_path / "eval", reference_models=[], sources=[f"sw={doc}"]))
    assert result.result.heldout == [] and list(result.result.models["mine"].languages) == ["sw"]
    assert result.result.models["mine"].languages["sw"].bytes == len("Habari ya asubuhi.")


@pytest.mark.parametrize("case", ["model", "split"])
def test_a_user_error_fails_the_run_with_its_one_line_message(prefect_harness, built, tmp_path, case):
    if case == "model":
        cfg = _config(built, tmp_path / "eval", models=[str(tmp_path / "nowhere")])
        expected = f"{tmp_path / 'nowhere'}: not a transformers model directory"
    else:
        spec = (built / "blend" / "blend.yaml").read_text().replace(f"split: {SPLIT}", "split: 100,0,0")
        (tmp_path / "blend.yaml").write_text(spec)
        cfg = _config(built, tmp_path / "eval", blend=str(tmp_path / "blend.yaml"))
        expected = "has no validation documents under split '100,0,0'"
    state = evaluate_flow(cfg, return_state=True)
    assert state.is_failed() and expected in state.message
    assert "\n" not in state.message and "Traceback" not in state.message
    assert not (tmp_path / "eval" / MARKER).exists()
