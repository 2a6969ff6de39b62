"""`bloomtrain evaluate` and bloomtrain.evaluation against transformers itself.

The reference is a plain loop over the documented convention: ``model(ids).logits.log_softmax(-1)`` at every
position of ``[</s>] + tokens``, one forward per window, summed and divided by ln 2 x the text's UTF-8 bytes.
The models are tiny random BLOOMs saved with ``save_pretrained`` beside a tiny tokenizer (conftest).
"""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest
import torch

from bloomdata.build import BuildConfig, run_build
from bloomtrain.cli import main as bloomtrain_main
from bloomtrain.evaluation.config import EvaluateConfig
from bloomtrain.evaluation.models import document_start, load_causal_lm
from bloomtrain.evaluation.run import run_evaluation
from bloomtrain.evaluation.scoring import Scorer, document_windows, score_sequences
from tests.bloomtrain.conftest import build_hf_bloom, write_tiny_tokenizer
from tests.data import CORPUS_DIR

VOCAB = 272  # the tiny tokenizer has 260 tokens (256 bytes + 4 specials)
CONTEXT = 48


def _save_model(out, seed: int, tokenizer: bool = True):
    model = build_hf_bloom(n_head=4, n_layer=2, hidden=64, vocab=VOCAB, seed=seed)
    model.save_pretrained(out)
    if tokenizer:
        write_tiny_tokenizer(out)
    return out


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return _save_model(root / "tiny-a", seed=0), _save_model(root / "tiny-b", seed=1)


def _corpus_lines(lang: str, n: int) -> list[dict]:
    with (CORPUS_DIR / f"{lang}.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line) for _, line in zip(range(n), f)]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """short.jsonl: documents shorter than the context; en/fr: the corpus' first documents (longer)."""
    root = tmp_path_factory.mktemp("data")
    short = ["Hello world.", "Une phrase.", "El zorro marrón rápido salta.", "a", "ß∂ƒ 日本語 😀"]
    (root / "short.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in short), encoding="utf-8")
    for lang in ("en", "fr"):
        rows = _corpus_lines(lang, 4)
        (root / f"{lang}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                                            encoding="utf-8")
    return root


def _reference_nll(model, ids: list[int], eod: int, context: int, stride: int) -> float:
    """A plain transformers loop: windows end at context, context + stride, ...; each scores what the last did not."""
    seq = [eod] + ids
    n, done, nll = len(ids), 0, 0.0
    while done < n:
        end = min(n, context if done == 0 else done + stride)  # last target of this window
        begin = max(0, end - context)  # first input
        with torch.no_grad():
            logp = model(torch.tensor([seq[begin:end]])).logits[0].float().log_softmax(-1)
        for t in range(done + 1, end + 1):  # seq[t] is predicted at input position t - 1
            nll -= float(logp[t - 1 - begin, seq[t]])
        done = end
    return nll


def _reference_bpb(model_dir, texts: list[str], context: int, stride: int) -> float:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    eod = tok.convert_tokens_to_ids("</s>")
    nll = sum(_reference_nll(model, tok(t, add_special_tokens=False)["input_ids"], eod, context, stride) for t in texts)
    return nll / (math.log(2) * sum(len(t.encode("utf-8")) for t in texts))


@pytest.mark.parametrize("stride", [None, 7, CONTEXT])
def test_bpb_equals_transformers_loop(model_dirs, data_dir, tmp_path, stride):
    config = EvaluateConfig(models=[str(model_dirs[0])], out_dir=str(tmp_path / "out"), context=CONTEXT,
                            stride=stride, batch_size=3, device="cpu", progress=False,
                            sources=[f"short={data_dir / 'short.jsonl'}", f"en={data_dir / 'en.jsonl'}",
                                     f"fr={data_dir / 'fr.jsonl'}"])
    report = run_evaluation(config)
    scores = report.models["tiny-a"].languages
    worst: dict[str, float] = {}
    for lang, texts in (("short", [json.loads(x)["text"] for x in (data_dir / "short.jsonl").open()]),
                        ("en", [r["text"] for r in _corpus_lines("en", 4)]),
                        ("fr", [r["text"] for r in _corpus_lines("fr", 4)])):
        expected = _reference_bpb(model_dirs[0], texts, CONTEXT, config.window_stride)
        worst[lang] = abs(scores[lang].bpb - expected) / expected
        assert scores[lang].bpb == pytest.approx(expected, rel=1e-5), lang
        assert scores[lang].bytes == sum(len(t.encode("utf-8")) for t in texts)
    assert scores["en"].tokens > 4 * CONTEXT  # the corpus documents really are longer than the context
    assert scores["short"].tokens < 5 * CONTEXT
    print(f"relative bpb error vs the transformers loop, stride {config.window_stride}: "
          + ", ".join(f"{lang} {err:.1e}" for lang, err in worst.items()))


def test_windows_score_every_token_once_with_the_promised_context():
    for n, context, stride in [(1, 4, 2), (4, 4, 2), (5, 4, 2), (100, 16, 8), (100, 16, 1), (100, 16, 16), (37, 10, 3)]:
        scored = []
        for a, b, first in document_windows(n, context, stride):
            assert 0 < b - a <= context
            for t in range(a + 1 + first, b + 1):
                scored.append(t)
                assert t - a >= min(t, context - stride + 1)  # tokens before t inside the window
        assert scored == list(range(1, n + 1)), (n, context, stride)


def test_batching_does_not_change_results(model_dirs, data_dir, tmp_path):
    common = dict(models=[str(model_dirs[0])], context=CONTEXT, device="cpu", progress=False,
                  sources=[str(data_dir / "short.jsonl"), f"en={data_dir / 'en.jsonl'}"])
    one = run_evaluation(EvaluateConfig(out_dir=str(tmp_path / "b1"), batch_size=1, **common))
    many = run_evaluation(EvaluateConfig(out_dir=str(tmp_path / "b5"), batch_size=5, **common))
    for lang, score in one.models["tiny-a"].languages.items():
        assert many.models["tiny-a"].languages[lang].nll_sum == pytest.approx(score.nll_sum, rel=1e-6)


def test_score_sequences_equals_transformers_loss(model_dirs):
    """Megatron-style samples of seq_length + 1 tokens: the per-sample sums of the trainer's convention."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dirs[0], dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(0)
    samples = torch.randint(0, 260, (5, 33), generator=gen)
    mask = (torch.rand(5, 32, generator=gen) > 0.2).float()
    nll, tokens = score_sequences(Scorer(model), samples, loss_mask=mask, batch_size=2)
    with torch.no_grad():
        logp = model(samples[:, :-1]).logits.float().log_softmax(-1)
        token_nll = -logp.gather(-1, samples[:, 1:, None])[..., 0]
        loss = model(samples, labels=samples).loss  # transformers shifts the labels itself
    np.testing.assert_allclose(nll, (token_nll * mask).sum(1).double().numpy(), rtol=1e-5)
    np.testing.assert_array_equal(tokens, mask.sum(1).long().numpy())
    full, _ = score_sequences(Scorer(model), samples, batch_size=5)
    assert full.sum() / (5 * 32) == pytest.approx(float(loss), rel=1e-5)


def test_a_head_that_differs_from_body_times_head_is_scored_from_the_logits(model_dirs):
    from transformers import BloomForCausalLM

    class SoftCapped(BloomForCausalLM):  # a final transform of the logits, as Gemma 2's soft-capping is
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            out.logits = 3.0 * torch.tanh(out.logits / 3.0)
            return out

    model = SoftCapped.from_pretrained(model_dirs[0], dtype=torch.float32).eval()
    scorer = Scorer(model)
    assert not scorer.split_head
    samples = torch.randint(0, 260, (3, 17), generator=torch.Generator().manual_seed(1))
    nll, _ = score_sequences(scorer, samples, batch_size=2)
    with torch.no_grad():
        logp = model(samples[:, :-1]).logits.log_softmax(-1)
    expected = -logp.gather(-1, samples[:, 1:, None])[..., 0].sum(1)
    np.testing.assert_allclose(nll, expected.double().numpy(), rtol=1e-5)
    assert Scorer(BloomForCausalLM.from_pretrained(model_dirs[0])).split_head


def test_cli_two_models_report_files_json_and_same_output_every_run(model_dirs, data_dir, tmp_path, capsys):
    argv = ["evaluate", "--model", str(model_dirs[0]), "--model", f"other={model_dirs[1]}",
            "--data", str(CORPUS_DIR / "en.jsonl"), "--data", str(CORPUS_DIR / "yo.jsonl"),
            "--data", f"x={data_dir / 'short.jsonl'}", "--max-docs-per-lang", "3", "--context", "32",
            "--batch-size", "4", "--device", "cpu", "--no-progress", "--json"]
    assert bloomtrain_main([*argv, "--out", str(tmp_path / "a")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert bloomtrain_main([*argv, "--out", str(tmp_path / "b")]) == 0
    capsys.readouterr()
    first = (tmp_path / "a" / "eval.json").read_bytes()
    assert first == (tmp_path / "b" / "eval.json").read_bytes()
    report = json.loads(first)
    assert list(report["models"]) == ["tiny-a", "other"]
    for result in report["models"].values():
        assert list(result["languages"]) == ["en", "yo", "x"]  # row lang fields, then LANG=
        for score in [*result["languages"].values(), result["overall"]]:
            assert set(score) == {"docs", "bytes", "tokens", "nll_sum", "loss", "ppl", "bpb"}
            assert score["loss"] == pytest.approx(score["nll_sum"] / score["tokens"])
            assert score["bpb"] == pytest.approx(score["nll_sum"] / (math.log(2) * score["bytes"]))
            assert score["ppl"] == pytest.approx(math.exp(score["loss"]))
        assert [s["docs"] for s in result["languages"].values()] == [3, 3, 3]
        assert result["overall"]["nll_sum"] == pytest.approx(sum(s["nll_sum"] for s in result["languages"].values()))
    assert report["tasks"] == {}
    assert summary["models"]["other"]["bpb"] == report["models"]["other"]["overall"]["bpb"]
    md = (tmp_path / "a" / "eval.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| language | docs"))
    assert "tiny-a" in header and "other" in header
    for lang in ("en", "yo", "x", "overall"):  # exactly the lower bpb of each row is bold
        row = next(line for line in md.splitlines() if line.startswith(f"| {lang} | "))
        bpb = {m: (r["overall"] if lang == "overall" else r["languages"][lang])["bpb"]
               for m, r in report["models"].items()}
        best = min(bpb, key=bpb.get)
        assert row.count("**") == 2 and f"**{bpb[best]:.4f}**" in row
    assert (tmp_path / "a" / "eval.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_max_docs_takes_the_first_documents_in_plan_order(model_dirs, tmp_path):
    rows = _corpus_lines("fr", 6)
    (tmp_path / "all.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    (tmp_path / "first.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows[:2]))
    common = dict(models=[str(model_dirs[0])], context=32, device="cpu", progress=False)
    capped = run_evaluation(EvaluateConfig(sources=[str(tmp_path / "all.jsonl")], max_docs_per_lang=2,
                                           out_dir=str(tmp_path / "o1"), **common))
    first = run_evaluation(EvaluateConfig(sources=[str(tmp_path / "first.jsonl")], out_dir=str(tmp_path / "o2"),
                                          **common))
    assert capped.models["tiny-a"].languages["fr"] == first.models["tiny-a"].languages["fr"]


def test_formats_and_rejects_counted_as_the_build_counts_them(model_dirs, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [r["text"] for r in _corpus_lines("es", 3)]
    lines = [json.dumps({"text": texts[0]}), "{not json", json.dumps({"text": ""}), json.dumps({"txt": "x"}),
             json.dumps({"text": 3}), json.dumps({"text": texts[1]})]
    with gzip.open(tmp_path / "es.jsonl.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    pq.write_table(pa.table({"text": [texts[2], None], "lang": ["pt", "pt"]}), tmp_path / "pt.parquet")
    (tmp_path / "it.txt").write_text(texts[0], encoding="utf-8")
    sources = [f"es={tmp_path / 'es.jsonl.gz'}", str(tmp_path / "pt.parquet"), f"it={tmp_path / 'it.txt'}"]
    report = run_evaluation(EvaluateConfig(models=[str(model_dirs[0])], sources=sources, out_dir=str(tmp_path / "o"),
                                           context=32, device="cpu", progress=False))
    build = run_build(BuildConfig(sources=sources, tokenizer=str(model_dirs[0]), out_dir=str(tmp_path / "build"),
                                  workers=0, progress=False))
    assert report.data.rejects == build.rejects
    assert report.data.rejects_total == build.rejects_total == 5
    assert report.data.documents == build.documents == 4
    assert {lang: s.docs for lang, s in report.models["tiny-a"].languages.items()} == {"es": 2, "pt": 1, "it": 1}


def _run_cli(argv, capsys) -> tuple[int, str]:
    code = bloomtrain_main(["evaluate", *argv, "--device", "cpu", "--no-progress"])
    return code, capsys.readouterr().err.strip()


def test_bad_inputs_are_one_line_errors(model_dirs, data_dir, tmp_path, capsys):
    data = ["--data", str(data_dir / "short.jsonl"), "--out", str(tmp_path / "o")]
    no_config = tmp_path / "empty"
    no_config.mkdir()
    broken = tmp_path / "broken"
    _save_model(broken, seed=0)
    (broken / "model.safetensors").write_bytes(b"not safetensors")
    no_tokenizer = _save_model(tmp_path / "no-tok", seed=0, tokenizer=False)
    all_rejected = tmp_path / "bad.jsonl"
    all_rejected.write_text('{"text": ""}\n{oops\n')
    cases = [
        (["--model", str(no_config), *data], "no config.json"),
        (["--model", str(broken), *data], "the model does not load"),
        (["--model", str(no_tokenizer), *data], "no tokenizer files"),
        (["--model", str(model_dirs[0]), "--data", f"yo={all_rejected}", "--out", str(tmp_path / "o")],
         "no documents for language 'yo'"),
        (["--model", str(model_dirs[0]), *data, "--stride", "4096"], "stride 4096 is larger than the context"),
    ]
    capsys.readouterr()  # save_pretrained's progress bars
    for argv, message in cases:
        code, err = _run_cli(argv, capsys)
        assert code == 2, argv
        assert message in err and len(err.splitlines()) == 1, err


def test_document_start_token_rule(model_dirs):
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    lm = load_causal_lm(model_dirs[0], device="cpu")
    assert (lm.start_id, lm.start_token) == (2, "</s>")  # BLOOM: the EOD every document ended with
    tok = PreTrainedTokenizerFast(tokenizer_file=str(model_dirs[0] / "tokenizer.json"), bos_token="<s>",
                                  eos_token="</s>")
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    assert document_start(tok, "llama-like") == (1, "<s>")  # a tokenizer that prepends <s> itself


def test_flags_parse_to_the_config():
    from bloomtrain.cli.evaluate import parser

    config, args = parser().parse(["--model", "exp/hf", "--model", "ref=/m/bloom-560m", "--data", "en=a.jsonl",
                                   "--data", "b/", "--text-field", "body", "--out", "o", "--max-docs-per-lang", "50",
                                   "--context", "1024", "--stride", "256", "--batch-size", "2", "--device", "cpu",
                                   "--dtype", "bfloat16", "--tasks", "xnli,xstorycloze", "--tasks", "xwinograd",
                                   "--json"])
    assert [(m.label, m.path) for m in config.models] == [("hf", "exp/hf"), ("ref", "/m/bloom-560m")]
    assert [(s.lang, s.paths, s.text_field) for s in config.sources] == [("en", ["a.jsonl"], "body"),
                                                                         (None, ["b/"], "body")]
    assert (config.out_dir, config.max_docs_per_lang, config.context, config.window_stride) == ("o", 50, 1024, 256)
    assert (config.batch_size, config.device, config.dtype) == (2, "cpu", "bfloat16")
    assert config.tasks == ["xnli", "xstorycloze", "xwinograd"] and args.json
    assert EvaluateConfig(models=["m"], sources=["x"], out_dir="o", context=101).window_stride == 50


def test_two_models_with_one_name_is_an_error_naming_models():
    from bloomdata.config_loader import load_config
    from bloomdata.errors import BloomstackError

    # was ValueError(message, "models"): the loader printed the tuple under "(top level)"
    with pytest.raises(BloomstackError, match=r"^eval\.yaml: models: two models are named 'a'; name them in models"):
        load_config(EvaluateConfig, values={"models": ["a=x", "a=y"], "sources": ["s"], "out_dir": "o"},
                    origin="eval.yaml")
