"""Model cards: ``bloomtrain export`` writes README.md from the run's records, ``bloomtrain model-card`` rebuilds it.

The records are those a real run leaves, written by their own writers where the project has one: a TP=2
checkpoint whose tag holds the trainer's training record, a metrics.jsonl of two launches (the second resumed,
and running one iteration past the exported tag), the blend YAML, the tokenizer with its training report,
clean_summary.json, a fertility JSON and an eval.json with an lm-eval task. The card must read back with
``ModelCard.load``, state eval.json's numbers exactly, and leave out (with a note) what no record holds.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from huggingface_hub import ModelCard

from bloomdata.blend.spec import BlendDataset, BlendSpec
from bloomdata.clean import CleanConfig, CleanSummary, run_clean
from bloomdata.errors import BloomstackError
from bloomdata.readers import SourceConfig
from bloomdata.tokenizer.bpe import REPORT_FILE, TokenizerReport
from bloomdata.tokenizer.fertility import FertilityRow, write_fertility
from bloomtrain.card.published import card_path, run_name
from bloomtrain.checkpoint import format as fmt
from bloomtrain.checkpoint.tags import commit_tag
from bloomtrain.cli import main as cli
from bloomtrain.config import (
    CardConfig,
    DataConfig,
    LoggingConfig,
    OptimConfig,
    ParallelConfig,
    ScheduleConfig,
    TrainConfig,
)
from bloomtrain.environment import RunEnvironment
from bloomtrain.evaluation.report import DataSummary, EvalReport, ModelResult, Score, write_report
from bloomtrain.metrics import START_EVENT
from bloomtrain.model.bloom import BloomModel
from bloomtrain.model.config import ModelConfig
from bloomtrain.parallel.state import ParallelState
from bloomtrain.provenance import TRAINING_KEY, Provenance, training_record
from tests.data import CORPUS_DIR

LANGS = ("en", "fr", "hi")
WEIGHTS = {"en": 0.5, "fr": 0.3, "hi": 0.2}
BODY_ORDER = ("## Model details", "## Training data", "## Evaluation", "## Uses and limitations", "## Compute",
              "## How to load")


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _train_config(tmp_path, tokenizer, validate: bool) -> TrainConfig:
    sets = {lang: str(tmp_path / "data" / lang) for lang in LANGS} if validate else {}
    return TrainConfig(
        model=ModelConfig.tiny(num_layers=2, vocab_size=250, pad_vocab_size_to=256), parallel=ParallelConfig(tp=2),
        optim=OptimConfig(precision="fp32"), schedule=ScheduleConfig(micro_batch_size=4, global_batch_size=8,
                                                                     train_iters=7),
        data=DataConfig(kind="blend", blend=str(tmp_path / "blend.yaml"), tokenizer=str(tokenizer), valid_sets=sets),
        logging=LoggingConfig(dir=str(tmp_path / "logs"), eval_interval=3 if validate else None))


def _checkpoint(tmp_path, cfg: TrainConfig, iteration: int = 6):
    """A TP=2 tag as the trainer saves it: layer files and the metadata with its training record."""
    ckpt, tag = tmp_path / "ckpt", f"global_step{iteration}"
    for tp_rank in range(2):
        shard = BloomModel(cfg.model, ParallelState.offline(tp_rank, 2, 0, 1))
        fmt.save_layer_states(ckpt, tag, tp_rank, fmt.model_layer_states(shard))
    position = {"iteration": iteration, "consumed_samples": iteration * 8}
    fmt.save_metadata(ckpt, tag, cfg.model, 2, 1, extra={TRAINING_KEY: training_record(cfg, position, 2)})
    commit_tag(ckpt, tag)
    return ckpt


def _metrics(tmp_path, validate: bool) -> None:
    """Two launches: iterations 1-4 (from t=1000 s), then 5-7 resumed after 4 (from t=2000 s); validation at 3 and
    6. The tag exported is iteration 6: the card counts 40 + 20 s of training loop on 2 one-thread processes."""
    env = RunEnvironment(device="cpu", device_name="Test CPU", processes=2, nodes=1, threads_per_process=1,
                         software={"python": "3.11.7", "torch": "2.13.0"}).model_dump()
    lines = []
    for start, iters in ((1000.0, range(1, 5)), (2000.0, range(5, 8))):
        lines.append({"event": START_EVENT, "text": "...", "time": start, "start_iteration": iters[0] - 1,
                      "environment": env})
        for i in iters:
            lines.append({"iteration": i, "loss": 6.0 - 0.25 * i, "consumed_tokens": i * 256, "tokens_per_s": 100.0 + i,
                          "time": start + 10.0 * (i - iters[0] + 1)})
            if validate and i % 3 == 0:
                lines.append({"iteration": i, "valid_loss": 5.0 - 0.1 * i, "valid_ppl": math.exp(5.0 - 0.1 * i)})
                lines += [{"iteration": i, f"valid/{lang}/loss": 5.0 - 0.1 * i + k, f"valid/{lang}/ppl": 99.0,
                           f"valid/{lang}/bpb": 3.0 - 0.1 * i + k} for k, lang in enumerate(LANGS)]
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def _blend(tmp_path) -> None:
    spec = BlendSpec(seq_length=32, token_budget=1536, alpha=0.3, split="90,10,0", datasets=[
        BlendDataset(name=lang, prefix=str(tmp_path / "data" / lang), weight=w, tokens=10_000,
                     tokens_drawn=int(1536 * w), epochs=1536 * w / 10_000) for lang, w in WEIGHTS.items()])
    (tmp_path / "blend.yaml").write_text(spec.to_yaml())


def _clean_summary(tmp_path) -> CleanSummary:
    """A real `bloomdata clean` of the test corpus' three languages, en with two copies of a document planted (in
    this process: about a second)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for lang in LANGS:
        lines = (CORPUS_DIR / f"{lang}.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
        (corpus / f"{lang}.jsonl").write_text("".join(lines + lines[:2] * (lang == "en")), encoding="utf-8")
    config = CleanConfig(sources=[SourceConfig(paths=[str(corpus / f"{lang}.jsonl")], lang=lang) for lang in LANGS],
                         out_dir=str(tmp_path / "clean"), workers=0, progress=False)
    return run_clean(config)


def _eval_json(tmp_path, model_dir) -> tuple[str, EvalReport]:
    langs = {lang: Score.of(10 + k, 5_000 + k, 1_200 + k, 4_000.0 + 17 * k) for k, lang in enumerate(LANGS)}
    report = EvalReport(
        models={"exported": ModelResult(path=str(model_dir), start_token="</s>", start_id=2, languages=langs,
                                        overall=Score.of(33, 15_003, 3_603, 12_051.0)),
                "reference": ModelResult(path=str(tmp_path / "other"), start_token="</s>", start_id=2,
                                         languages=langs, overall=Score.of(33, 15_003, 3_603, 12_051.0))},
        tasks={"xnli_en": {"exported": {"acc": 0.41, "acc_stderr": 0.02}, "reference": {"acc": 0.5}}},
        task_splits={"xnli_en": "test"},
        data=DataSummary(sources=[], rows_read=33, documents=33, rejects={}, rejects_total=0), settings={"context": 32})
    write_report(report, tmp_path / "eval")
    return str(tmp_path / "eval" / "eval.json"), report


def _run(tmp_path, tiny_tokenizer_dir, validate: bool = True):
    cfg = _train_config(tmp_path, tiny_tokenizer_dir, validate)
    drawn = {lang: 4_115 for lang in LANGS}
    report = TokenizerReport(languages=list(LANGS), bytes_available=drawn,
                             probabilities={lang: 1 / 3 for lang in LANGS},
                             bytes_quota=drawn, bytes_drawn=drawn, docs_drawn=drawn, total_bytes_drawn=12_345, seed=0,
                             alpha=0.3, byte_budget=12_345, min_frequency=2, vocab_size_requested=250, vocab_size=250,
                             sampling_seconds=0.1, training_seconds=0.1, wall_seconds=0.2)
    (tiny_tokenizer_dir / REPORT_FILE).write_text(report.model_dump_json())
    _blend(tmp_path)
    _metrics(tmp_path, validate)
    return _checkpoint(tmp_path, cfg)


def test_export_writes_a_card_from_every_record(tmp_path, tiny_tokenizer_dir):
    ckpt, hf = _run(tmp_path, tiny_tokenizer_dir), tmp_path / "hf"
    fertility = tmp_path / "fertility.json"
    write_fertility(str(fertility), [FertilityRow(lang, docs=5, words=100, chars=500, tokens=130 + k)
                                     for k, lang in enumerate(LANGS)], str(tiny_tokenizer_dir))
    eval_json, report = _eval_json(tmp_path, hf)
    clean = _clean_summary(tmp_path)
    assert cli(["export", str(ckpt), str(hf), "--tokenizer", str(tiny_tokenizer_dir), "--license", "apache-2.0",
                "--name", "bloom-tiny-test", "--clean-summary", clean.out_dir + "/clean_summary.json",
                "--fertility", str(fertility), "--evaluation", eval_json,
                "--evaluation-split", "validation", "--power-watts", "10", "--carbon-intensity", "0.5"]) == 0

    card = ModelCard.load(hf / "README.md")
    data = card.data.to_dict()
    assert data["language"] == list(LANGS) and data["license"] == "apache-2.0"
    assert data["model-index"][0]["name"] == "bloom-tiny-test" and card.text.lstrip().startswith("# bloom-tiny-test\n")
    # for publication: no path of this machine; the files it names are relative to the card's folder
    text = (hf / "README.md").read_text()
    assert str(tmp_path) not in text and "/tmp" not in text, [x for x in text.splitlines() if "/tmp" in x]
    assert "`../ckpt`, tag `global_step6`" in text and "the blend `../blend.yaml`" in text
    assert "(`exported` in `../eval/eval.json`)" in text and 'model_id = "bloom-tiny-test"' in text
    assert data["library_name"] == "transformers" and data["pipeline_tag"] == "text-generation"
    assert {"bloom", "bloomstack", "multilingual"} <= set(data["tags"])
    # model-index: exactly eval.json's per-language numbers of this model, one entry per language and metric
    results = card.data.eval_results
    lm = {(r.dataset_config, r.metric_type): r.metric_value for r in results if r.dataset_config}
    expected = {(lang, name): getattr(s, key) for lang, s in report.models["exported"].languages.items()
                for key, name in (("loss", "loss"), ("ppl", "perplexity"), ("bpb", "bits_per_byte"))}
    assert lm == expected and len(lm) == 3 * len(LANGS)
    assert all(r.dataset_split == "validation" for r in results if r.dataset_config)
    assert [(r.dataset_type, r.dataset_split, r.metric_type, r.metric_value) for r in results
            if not r.dataset_config] == [("xnli_en", "test", "acc", 0.41)]

    body = card.text
    assert [body.index(h) for h in BODY_ORDER] == sorted(body.index(h) for h in BODY_ORDER)
    assert "| tokens seen | 1,536 (48 samples of 32 tokens) |" in body
    assert "| final training loss | 4.5000 (perplexity 90.02) |" in body  # iteration 6, not the later 7
    assert "| validation loss, last evaluation | 4.4000 (perplexity 81.45) |" in body
    assert "| parallel layout | tensor 2 x pipeline 1 x data 1 (2 processes) |" in body
    assert "2 x CPU process (Test CPU), 1 thread(s) each, 1 node(s)" in body
    assert "| wall time | 1 min 00 s of training loop over 2 launch(es) |" in body
    assert "| CPU core-hours | 0.033 |" in body  # 60 s x 2 processes x 1 thread
    assert "| energy | 0.0003 kWh" in body and "| emissions | 0.0002 kg CO2eq" in body
    assert "| en | 50.00% | 10,000 | 768 | 0.08 |" in body and "(languages.png)" in body
    total = f"| total | {clean.documents_in:,} | {100 * clean.documents_kept / clean.documents_in:.1f}% | " \
            f"{100 * clean.bytes_kept / clean.bytes_in:.1f}% |"
    assert total in body and clean.removed["exact_duplicate"] == 2  # cleaning: documents and bytes kept
    assert f"`bloomdata clean` with the default settings kept {clean.documents_kept:,} of 482 documents" in body
    assert f"| en | 162 | {100 * 160 / 162:.1f}% |" in body and "removed: exact_duplicate" in body
    assert "| fr | 5 | 1.310 | 0.2620 |" in body  # fertility
    assert "250 tokens, trained on 12,345 bytes sampled with alpha 0.3 from 3 languages" in body
    en = report.models["exported"].languages["en"]
    assert f"| en | 10 | 5,000 | 1,200 | {en.loss:.4f} | {en.ppl:.2f} | {en.bpb:.4f} |" in body
    assert "(validation_curves.png)" in body and "| hi | 6 | 6.4000 | 99.00 | 4.4000 |" in body
    assert "Not recorded" not in body
    for png in ("languages.png", "validation_curves.png"):
        assert (hf / png).read_bytes().startswith(b"\x89PNG")
    provenance = Provenance.model_validate_json((hf / "provenance.json").read_text())
    assert provenance.training.iteration == 6 and provenance.export.dtype == "float32"
    assert provenance.card.evaluation == eval_json and provenance.card.license == "apache-2.0"


def test_a_run_without_evaluation_or_cleaning_gets_no_such_sections_until_an_evaluation(tmp_path, tiny_tokenizer_dir):
    ckpt, hf = _run(tmp_path, tiny_tokenizer_dir, validate=False), tmp_path / "hf"
    assert cli(["export", str(ckpt), str(hf), "--tokenizer", str(tiny_tokenizer_dir)]) == 0
    card = ModelCard.load(hf / "README.md")
    assert "license" not in card.data.to_dict() and card.data.eval_results is None
    body = card.text
    for absent in ("## Evaluation", "### Cleaning", "kWh", "CO2eq |", "model-index", "validation_curves.png",
                   "| fertility"):
        assert absent not in body and absent not in str(card)
    assert "*Not recorded: evaluation; no eval.json was given and the run did not validate" in body
    assert "*Not recorded: cleaning; " in body and "*Not recorded: the licence; none was given" in body
    assert "*Not recorded: energy and emissions; no power figure was given" in body
    assert len(re.findall(r"^\*Not recorded: .*\*$", body, flags=re.MULTILINE)) == 5  # + fertility per language
    assert body.lstrip().startswith("# ckpt\n")  # no --name: the run's name (its checkpoint directory's)

    # A later evaluation: the card is rebuilt from the records, and provenance.json keeps the new record
    eval_json, report = _eval_json(tmp_path, hf)
    assert cli(["model-card", str(hf), "--evaluation", eval_json, "--license", "other"]) == 0
    first = (hf / "README.md").read_text()
    card = ModelCard.load(hf / "README.md")
    assert "## Evaluation" in card.text and card.data.license == "other"
    assert {(r.dataset_config, r.metric_type): r.metric_value for r in card.data.eval_results if r.dataset_config}[
        ("hi", "bits_per_byte")] == report.models["exported"].languages["hi"].bpb
    assert all(r.dataset_split == "test" for r in card.data.eval_results if r.dataset_config)
    assert cli(["model-card", str(hf)]) == 0 and (hf / "README.md").read_text() == first  # the same records


def test_model_card_of_a_checkpoint_and_errors_that_name_the_fix(tmp_path, tiny_tokenizer_dir, capsys):
    ckpt = _run(tmp_path, tiny_tokenizer_dir)
    assert cli(["model-card", str(ckpt), "--out", str(tmp_path / "card" / "README.md")]) == 0
    body = ModelCard.load(tmp_path / "card" / "README.md").text
    assert "bloomtrain export ../ckpt OUT_DIR" in body and (tmp_path / "card" / "languages.png").is_file()

    assert cli(["model-card", str(ckpt)]) == 2
    assert "is a checkpoint: set --out (a file path) for its card" in capsys.readouterr().err
    assert cli(["model-card", str(tmp_path)]) == 2
    assert "neither an exported model (no provenance.json) nor a checkpoint directory" in capsys.readouterr().err
    # A record given on purpose that is not there: refused before anything is written
    assert cli(["export", str(ckpt), str(tmp_path / "hf"), "--evaluation", str(tmp_path / "nope.json")]) == 2
    assert f"evaluation {tmp_path / 'nope.json'}: no such JSON file" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()
    eval_json, _ = _eval_json(tmp_path, tmp_path / "elsewhere")  # two models, neither read from this directory
    with pytest.raises(BloomstackError, match="set evaluated_model to this model's name"):
        from bloomtrain.export import export

        export(ckpt, tmp_path / "hf", card=CardConfig(evaluation=eval_json))


def test_a_card_names_the_run_and_its_files_as_published(tmp_path):
    """The default name is the run's, not the export folder's; files are named relative to the card's folder
    when they belong to the same run folder, else by their run directory and name: never an absolute path."""
    def named(checkpoint: str) -> str:
        return run_name(Provenance(checkpoint=checkpoint, tag="t", model=ModelConfig.tiny(), tp_size=1, pp_size=1))

    assert named("/data/runs/tiny/checkpoints") == "tiny" and named("/data/ckpt") == "ckpt"
    card = tmp_path / "run" / "hf"
    assert card_path(tmp_path / "run" / "blend" / "blend.yaml", card) == "../blend/blend.yaml"
    assert card_path(tmp_path / "run" / "hf" / "eval.json", card) == "eval.json"
    assert card_path("/data/runs/tiny/checkpoints", card) == "tiny/checkpoints"
