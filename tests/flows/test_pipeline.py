"""bloom_pipeline end to end on a 3-language slice of the demo corpus: the clean stage (in-process), real
tokenizer, Dask build (a LocalCluster of one worker process; test_data_flows covers an existing cluster's
address), blend, torchrun training (2 processes, tp=2, gloo) of a tiny BLOOM, HF export and a sample from
transformers, and the evaluation of the export on each language's validation documents. The corpus is a copy
with an exact duplicate planted: the tokenizer and the build must read the cleaned shards, without it.

The first run fails in the training stage (a bad trainer override); the rerun with the fix must resume
there: the tokenizer, datasets and blend are not rebuilt. It then fails in the evaluation (a reference
model that does not exist), with the one-line error as its message; the rerun resumes at the evaluation.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

from bloomdata.config_loader import derive
from bloomdata.megatron.indexed import IndexedDataset
from bloomdata.megatron.splits import split_range
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.bpe import load_tokenizer
from bloomtrain.card import CARD_FILE
from bloomtrain.evaluation.inputs import read_documents
from bloomtrain.model.config import PRESETS
from flows.clean import cleaned_sources
from flows.config import DEMO_CORPUS, PipelineConfig, demo_train_config
from flows.demo import report
from flows.pipeline import bloom_pipeline
from flows.stages import MARKER, read_marker
from tests.flows.prefect_api import artifact

pytestmark = pytest.mark.integration  # tests/tiers.py

LANGS = ("en", "fr", "yo")
EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")


def _corpus(tmp_path: Path) -> tuple[list[SourceConfig], str]:
    """The demo's en, fr and yo files, en with a copy of its 8th document planted at the end; and that text."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for lang in LANGS:
        shutil.copy(DEMO_CORPUS / f"{lang}.jsonl.gz", corpus)
    with gzip.open(corpus / "en.jsonl.gz", "rt", encoding="utf-8") as f:
        lines = f.readlines()
    with gzip.open(corpus / "en.jsonl.gz", "wt", encoding="utf-8") as f:
        f.writelines([*lines, lines[7]])
    return [SourceConfig(paths=[str(corpus / f"{lang}.jsonl.gz")], lang=lang) for lang in LANGS], \
        json.loads(lines[7])["text"]


def _config(out: Path, corpus: list[SourceConfig]) -> PipelineConfig:
    cfg = PipelineConfig(out_dir=str(out), fertility_docs_per_lang=20, corpus=corpus)
    cfg.clean = derive(cfg.clean, workers=0)  # in the flow process: its 311 documents take about a second
    cfg.tokenizer = derive(cfg.tokenizer, vocab_size=320, byte_budget=120_000)
    cfg.dataset = derive(cfg.dataset, workers=1)  # the default path: a fresh LocalCluster
    tree = demo_train_config().model_dump()
    tree["model"] = PRESETS["tiny"](num_layers=2, hidden_size=64, num_heads=4, seq_length=32).model_dump()
    tree["schedule"].update(micro_batch_size=4, global_batch_size=8, train_iters=6, warmup_samples=8,
                            decay_samples=48)
    tree["checkpoint"].update(save_interval=None)
    tree["logging"].update(log_interval=1, eval_interval=6, eval_iters=1)
    cfg.train.train = type(cfg.train.train).model_validate(tree)
    cfg.train.retries = 0
    cfg.export.prompts, cfg.export.max_new_tokens = ["The", "Le"], 4
    return cfg


def test_pipeline_fails_in_training_then_resumes_there(prefect_harness, tmp_path):
    corpus, planted = _corpus(tmp_path)
    cfg = _config(tmp_path / "run", corpus)
    cfg.train.overrides = ["schedule.train_iters=oops"]  # the trainer rejects it: exit code 2
    state = bloom_pipeline(cfg, return_state=True)
    assert state.is_failed() and "train stage Failed" in state.message
    assert "train_iters" in state.message  # the trainer's own error, quoted from its last lines
    stamps = {s: (tmp_path / "run" / s / MARKER).stat().st_mtime_ns for s in ("clean", "tokenizer", "data", "blend")}
    assert not (tmp_path / "run" / "train" / MARKER).exists()

    cfg.train.overrides = []
    cfg.evaluate.reference_models = [str(tmp_path / "no-such-model")]
    state = bloom_pipeline(cfg, return_state=True)
    assert state.is_failed() and state.message == (
        f"evaluate stage Failed: {tmp_path / 'no-such-model'}: not a transformers model directory (no "
        "config.json); give a directory written by `bloomtrain export` or save_pretrained")
    assert not (tmp_path / "run" / "eval" / MARKER).exists()
    stamps |= {s: (tmp_path / "run" / s / MARKER).stat().st_mtime_ns for s in ("train", "hf")}

    cfg.evaluate.reference_models = [f"again={tmp_path / 'run' / 'hf'}"]  # the export itself, as a reference
    result = bloom_pipeline(cfg)
    assert {s: (tmp_path / "run" / s / MARKER).stat().st_mtime_ns for s in stamps} == stamps  # not rebuilt

    # The clean stage ran first, and the tokenizer and the build read its shards: the planted copy is gone,
    # the e-mail addresses of the demo's en documents are redacted.
    clean = result.clean.result
    assert clean.languages["en"].removed == {"exact_duplicate": 1} and clean.emails_redacted >= 3
    sources = cleaned_sources(result.clean)
    assert [s.paths for s in sources] == [[str(tmp_path / "run" / "clean" / "data" / lang)] for lang in LANGS]
    assert read_marker(tmp_path / "run" / "tokenizer").config["sources"] == [s.model_dump() for s in sources]
    cleaned = read_documents(sources).texts
    tokenizer = load_tokenizer(result.tokenizer.result.tokenizer_dir)
    en = IndexedDataset(result.dataset.result.outputs["en"].prefix)
    built = [tokenizer.decode(en[i][:-1].tolist()) for i in range(len(en))]  # each document, its </s> dropped
    assert built == cleaned["en"] and len(built) == 160 and built.count(planted) == 1
    assert not any(EMAIL.search(text) for text in built) and sum("PI:EMAIL" in text for text in built) == 3
    rows = {r["language"]: r for r in json.loads(artifact("clean-report").data)}
    assert rows["en"]["documents in"] == 161 and rows["en"]["kept"] == 160
    assert rows["en"]["removed: exact_duplicate"] == 1
    assert "data:image/png;base64," in artifact("clean-chart").data
    run = result.train.result
    train = run.summary
    assert train.iterations == 6 and 0 < train.final_loss < 8 and train.valid_loss is not None
    metrics = [json.loads(x) for x in Path(run.paths.metrics).read_text().splitlines()]
    assert [m["iteration"] for m in metrics if "loss" in m] == list(range(1, 7))
    blend = json.loads((tmp_path / "run" / "blend" / "blend.json").read_text())
    assert {d["name"] for d in blend["datasets"]} == {"en", "fr", "yo"}
    assert blend["token_budget"] == 6 * 8 * 32
    hf = Path(result.export.result.hf_dir)
    assert json.loads((hf / "config.json").read_text())["vocab_size"] >= result.tokenizer.result.report.vocab_size
    # The exported model, run by transformers on the trainer's validation samples, scores what the
    # trainer measured on them: the export is the trained model.
    assert result.export.result.evaluation.samples == 8
    assert result.export.result.evaluation.loss == pytest.approx(train.valid_loss, rel=2e-4)
    front = artifact("pipeline-summary").data  # numbers, loss curve and every stage's output
    assert f"| HF export | `{hf}` |" in front and f"| final training loss | {train.final_loss:.4f} |" in front
    assert "data:image/png;base64," in front
    assert f"| cleaned corpus | `{tmp_path / 'run' / 'clean' / 'data'} (310 of 311 documents kept)` |" in front
    # One validation set per language in training (its dataset's validation split), with the tokenizer for
    # bits per byte: logged at the evaluation and tabulated in the training summary.
    run_cfg = yaml.safe_load(Path(run.paths.config).read_text())
    assert run_cfg["data"]["tokenizer"] == result.tokenizer.result.tokenizer_dir
    assert {k: v["path"] for k, v in run_cfg["data"]["valid_sets"].items()} == \
        {lang: o.prefix for lang, o in result.dataset.result.outputs.items()}
    assert set(train.valid_sets) == {"en", "fr", "yo"}
    assert all(p.iteration == 6 and 0 < p.bpb < 8 for p in train.valid_sets.values())
    assert "## Validation per set" in front and "| yo | 6 |" in front
    samples = result.export.result.samples  # generated by transformers from the exported directory
    assert len(samples) == 2 and samples[0].startswith("The") and samples[1].startswith("Le")

    # The evaluation: each language's validation documents (the corpus' documents of the blend's 90,10,0
    # validation range, in order) scored by the export and by the reference, which is the same model here.
    scores = json.loads((tmp_path / "run" / "eval" / "eval.json").read_text())["models"]
    assert list(scores) == ["exported", "again"] and scores["exported"] == scores["again"]
    for lang in LANGS:
        begin, end = split_range("90,10,0", "valid", len(cleaned[lang]), "core")
        heldout = (tmp_path / "run" / "eval" / "heldout" / f"{lang}.jsonl").read_text(encoding="utf-8")
        assert [json.loads(line)["text"] for line in heldout.splitlines()] == cleaned[lang][begin:end]
        assert scores["exported"]["languages"][lang]["docs"] == end - begin > 0
        assert 0 < scores["exported"]["languages"][lang]["bpb"] < 8  # 6 iterations: poor, but under 8 bits a byte
    assert {m: r.model_dump() for m, r in result.evaluate.result.models.items()} == scores
    assert "## Bits per byte on held-out text" in front
    printed = report(result).splitlines()  # what `make demo` prints: the table last
    assert printed[-5].split()[:2] == ["language", "docs"] and printed[-1].split()[0] == "overall"
    assert printed[-2].split()[:2] == ["yo", str(scores["exported"]["languages"]["yo"]["docs"])]
    _check_model_card(hf, result, scores["exported"], printed)


def _check_model_card(hf: Path, result, exported: dict, printed: list[str]) -> None:
    """The export's README.md, rebuilt after the evaluation: eval.json's numbers in its model-index, and every figure
    of the demo's report that a card states, digit for digit."""
    card = ModelCard.load(hf / CARD_FILE)
    assert card.data.language == list(LANGS) and "license" not in card.data.to_dict()  # no licence was given
    metrics = (("loss", "loss"), ("ppl", "perplexity"), ("bpb", "bits_per_byte"))
    assert {(r.dataset_config, r.metric_type): r.metric_value for r in card.data.eval_results} == \
        {(lang, name): exported["languages"][lang][key] for lang in LANGS for key, name in metrics}
    assert {r.dataset_split for r in card.data.eval_results} == {"validation"}
    assert card.data.model_name == "bloomstack-demo"  # the pipeline's name: export.name is not set
    assert str(hf.parent) not in str(card)  # for publication: no path of this machine
    body = card.text
    final, ppl, valid, valid_ppl, speed = re.search(r"final loss (\S+)  perplexity (\S+)  validation loss (\S+) "
                                                    r"\(ppl (\S+)\)  (\S+) tokens/s", "\n".join(printed)).groups()
    assert f"| final training loss | {final} (perplexity {ppl}) |" in body
    assert f"| validation loss, last evaluation | {valid} (perplexity {valid_ppl}) |" in body
    assert f"| throughput | {speed} tokens/s" in body
    for row in printed[-4:]:  # language, documents, bytes, bits per byte of the export (then the reference's)
        lang, docs, nbytes, bpb = row.split()[:4]
        assert re.search(rf"^\| {lang} \| {docs} \| {nbytes} \| [\d,]+ \| [\d.]+ \| [\d.]+ \| {bpb} \|$",
                         body, re.M), row
    clean = result.clean.result
    assert (f"`bloomdata clean` with the default settings kept {clean.documents_kept} of {clean.documents_in} "
            "documents") in body
    assert f"({clean.documents_kept} of {clean.documents_in} documents kept" in "\n".join(printed)
    assert "Fertility (tokens per whitespace word" in body and "![Validation curves](validation_curves.png)" in body
    assert [line.split(";")[0] for line in body.splitlines() if line.startswith("*Not recorded")] == \
        ["*Not recorded: the licence", "*Not recorded: energy and emissions"]  # nothing else is unknown
