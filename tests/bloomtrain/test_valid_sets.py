"""Named validation sets (``data.valid_sets``): per-set loss, perplexity and bits per byte during training.

The data is real text (tests/data/corpus: French, Swahili, Chinese), tokenized by a BLOOM-style tokenizer
trained here, written as Megatron datasets and blended with a 80/20 split. Two sets are languages (their
validation split, from the training blend), one is a blend YAML. Checked against references:

- the per-id byte table against the UTF-8 length of whole documents, and the bytes of every evaluated
  sample against transformers' own byte-level decoding of its target tokens;
- bpb = loss x tokens / (ln 2 x bytes), ppl = exp(loss), at every evaluation;
- TP2, PP2 and DP2 runs log the same per-set losses as TP1 (1e-5);
- the TP1 run's final per-set losses equal ``bloomtrain.evaluation``'s scoring of the exported model with
  transformers over the same samples (1e-5, fp32).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from bloomdata.blend.spec import BlendDataset, BlendSpec
from bloomdata.megatron.builder import spread_indices
from bloomdata.megatron.indexed import IndexedDatasetWriter
from bloomdata.tokenizer.bpe import eod_id, load_tokenizer, save_tokenizer, train_from_texts
from bloomtrain.config import load_config
from bloomtrain.data import build_valid_sets, eval_micro_batches, token_byte_lengths
from tests.bloomtrain.train_helpers import EXACT, TINY, train_rank
from tests.data import CORPUS_DIR
from tests.harness.gloo_harness import run_distributed

LANGS = ("fr", "sw", "zh")
SEQ = 32
VOCAB_ROWS = 384  # the model's padded vocabulary (the tokenizer has fewer ids)
SETS = {"fr": 8, "zh": 10, "mix": 7}  # samples per evaluation: 10 and 7 leave a padded group at DP2
ITERS = 2


def _texts(lang: str) -> list[str]:
    with (CORPUS_DIR / f"{lang}.jsonl").open(encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f][:60]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("valid_sets")
    texts = {lang: _texts(lang) for lang in LANGS}
    tok = train_from_texts([t for lang in LANGS for t in texts[lang]], vocab_size=360, min_frequency=2)
    tok_dir = save_tokenizer(tok, root / "tokenizer")
    eod = eod_id(tok)
    for lang in LANGS:
        with IndexedDatasetWriter(root / lang, dtype=np.uint16) as w:
            for text in texts[lang]:
                w.add_document(tok.encode(text, add_special_tokens=False).ids + [eod])
    blend = BlendSpec(seq_length=SEQ, seed=7, split="80,20,0", datasets=[
        BlendDataset(name=lang, prefix=str(root / lang), weight=w) for lang, w in zip(LANGS, (0.5, 0.3, 0.2))])
    (root / "blend.yaml").write_text(blend.to_yaml())
    mix = BlendSpec(seq_length=SEQ, seed=7, valid_range="0.8:1", datasets=[
        BlendDataset(name="fr", prefix=str(root / "fr"), weight=0.6),
        BlendDataset(name="sw", prefix=str(root / "sw"), weight=0.4)])
    (root / "mix.yaml").write_text(mix.to_yaml())
    sets = (f"{{fr: {root / 'fr'}, zh: {{path: {root / 'zh'}, samples: {SETS['zh']}}}, "
            f"mix: {{path: {root / 'mix.yaml'}, samples: {SETS['mix']}}}}}")
    overrides = [*EXACT, f"schedule.train_iters={ITERS}", "logging.eval_interval=1", "logging.eval_iters=1",
                 "data.kind=blend", f"data.blend={root / 'blend.yaml'}", f"data.cache_dir={root / 'cache'}",
                 f"data.tokenizer={tok_dir}", f"data.valid_sets={sets}",
                 f"model.vocab_size={tok.get_vocab_size()}", f"model.pad_vocab_size_to={VOCAB_ROWS}"]
    return {"root": root, "tokenizer": tok_dir, "texts": texts, "overrides": overrides}


def _records(logs: Path) -> dict[int, dict]:
    """Every metrics record with a valid/ key, merged per iteration."""
    out: dict[int, dict] = {}
    for line in (logs / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if any(k.startswith("valid/") for k in rec):
            out.setdefault(rec["iteration"], {}).update(rec)
    return out


def _train(corpus: dict, world: int, name: str, extra: list[str]) -> dict[int, dict]:
    logs = corpus["root"] / name / "logs"
    overrides = [*corpus["overrides"], f"logging.dir={logs}", f"checkpoint.dir={corpus['root'] / name / 'ckpt'}",
                 *extra]
    results = run_distributed(train_rank, world, overrides, timeout_s=300)
    for r in results:
        assert r["error"] is None, r["error"]
    return _records(logs)


@pytest.fixture(scope="module")
def tp1(corpus) -> dict[int, dict]:
    return _train(corpus, 1, "tp1", [])


def _config(corpus):
    return load_config(TINY, corpus["overrides"])


def test_byte_table_sums_to_the_utf8_bytes_of_each_document(corpus):
    tok = load_tokenizer(corpus["tokenizer"])
    table = token_byte_lengths(tok)
    assert table[eod_id(tok)] == 0 and table[:4].tolist() == [0, 0, 0, 0]  # <unk> <s> </s> <pad>
    for lang in LANGS:
        for text in corpus["texts"][lang]:
            ids = tok.encode(text, add_special_tokens=False).ids
            assert int(table[ids].sum()) == len(text.encode("utf-8")), (lang, text[:40])
    # zh keeps characters split across tokens at this vocabulary: the table is per byte, not per character
    zh = tok.encode(corpus["texts"]["zh"][0], add_special_tokens=False).ids
    assert any("\ufffd" in tok.decode([i]) for i in zh)


def test_samples_are_fixed_and_spread_over_the_validation_split(corpus):
    cfg = _config(corpus)
    sets = build_valid_sets(cfg)
    again = build_valid_sets(cfg)
    assert {k: len(v) for k, v in sets.items()} == {"fr": 8, "zh": 10, "mix": 7}
    for name, s in sets.items():
        assert all(np.array_equal(s[k], again[name][k]) for k in range(len(s)))
    fr = sets["fr"].components[0]
    total = len(fr)
    assert total > 3 * len(sets["fr"])  # more samples in the split than read: the choice matters
    positions = np.asarray(fr.shuffle_index)[sets["fr"].served]  # where the chosen samples lie in the split
    assert positions.tolist() == [(2 * k + 1) * total // 16 for k in range(8)]
    assert positions[0] < total / 8 and positions[-1] > total * 7 / 8  # both ends of the split, not a prefix
    docs = fr.document_range
    assert docs == (48, 60)  # 80,20,0 of 60 documents: the last 12, which training never reads
    # the blend set: 7 samples shared by weight 0.6 / 0.4 with Megatron's greedy rule
    assert np.bincount(sets["mix"].which).tolist() == [4, 3]
    assert spread_indices(fr, 10 * total).shape == (total,)  # asking for more reads each sample once


def test_eval_micro_batches_read_every_sample_once_on_every_layout(corpus):
    s = build_valid_sets(_config(corpus))["zh"]  # 10 samples
    for mbs, dp in ((2, 1), (2, 2), (1, 4), (4, 2)):
        seen = []
        counts = set()
        for rank in range(dp):
            batches, n = eval_micro_batches(s, mbs, rank, dp)
            got = list(batches)
            counts.add((n, len(got)))
            for ids, (labels, mask) in got:
                for row in range(ids.shape[0]):
                    if mask[row].any():
                        assert mask[row].all()
                        seen.append(np.concatenate([ids[row].numpy(), labels[row, -1:].numpy()]))
        assert len(counts) == 1 and counts.pop()[0] == -(-10 // (mbs * dp))
        want = [s[k] for k in range(10)]
        assert sorted(map(bytes, (np.asarray(x, np.int64) for x in seen))) == sorted(map(bytes, want))


@pytest.mark.integration
def test_tp1_logs_loss_ppl_bpb_of_each_set_at_each_evaluation(corpus, tp1):
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # GPT-2's byte <-> character table

    assert sorted(tp1) == list(range(1, ITERS + 1))
    sets = build_valid_sets(_config(corpus))
    tok = load_tokenizer(corpus["tokenizer"])
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    for name, s in sets.items():
        # the bytes the targets decode to: transformers' byte-level decoding of their token strings
        nbytes = sum(len(bytes(byte_of[c] for i in s[k][1:] if (t := tok.id_to_token(int(i))) not in special
                               for c in t)) for k in range(len(s)))
        tokens = len(s) * SEQ
        for it, rec in tp1.items():
            loss = rec[f"valid/{name}/loss"]
            assert math.isfinite(loss) and 2.0 < loss < math.log(VOCAB_ROWS) + 1, (name, it, loss)
            assert rec[f"valid/{name}/ppl"] == pytest.approx(math.exp(loss), rel=1e-12)
            assert rec[f"valid/{name}/bpb"] == pytest.approx(loss * tokens / (math.log(2) * nbytes), rel=1e-12)
    assert tp1[2]["valid/fr/loss"] != tp1[1]["valid/fr/loss"]  # the weights moved between evaluations
    assert "valid_loss" not in tp1[1]  # the overall validation stays its own record


@pytest.mark.integration
@pytest.mark.parametrize("layout", ["tp2", "pp2", "dp2"])
def test_parallel_layouts_log_the_same_valid_losses(corpus, tp1, layout):
    extra = {"tp2": ["parallel.tp=2"], "pp2": ["parallel.pp=2"], "dp2": []}[layout]
    other = _train(corpus, 2, layout, extra)
    assert sorted(other) == sorted(tp1)
    for it in tp1:
        for name in SETS:
            for metric in ("loss", "bpb"):
                key = f"valid/{name}/{metric}"
                assert other[it][key] == pytest.approx(tp1[it][key], abs=1e-5), (layout, it, key)


@pytest.mark.integration
def test_trainer_valid_losses_equal_evaluate_on_the_exported_model(corpus, tp1, tmp_path):
    """The trainer's final per-set losses (DeepSpeed pipeline, our model code) against the evaluation library's
    scoring of the exported checkpoint (transformers' BloomForCausalLM) over the same samples."""
    from bloomtrain.config import ExportConfig
    from bloomtrain.evaluation.models import load_causal_lm
    from bloomtrain.evaluation.scoring import Scorer, score_sequences
    from bloomtrain.export import run_export

    hf_dir = run_export(ExportConfig(checkpoint=str(corpus["root"] / "tp1" / "ckpt"), out_dir=str(tmp_path / "hf"),
                                     tokenizer=str(corpus["tokenizer"])))
    lm = load_causal_lm(hf_dir, dtype="float32", device="cpu")
    scorer = Scorer(lm.model)
    table = token_byte_lengths(load_tokenizer(corpus["tokenizer"]))
    for name, s in build_valid_sets(_config(corpus)).items():
        samples = np.stack([s[k] for k in range(len(s))])  # [n, SEQ + 1]
        nll, tokens = score_sequences(scorer, samples, batch_size=4)
        assert tokens.sum() == len(s) * SEQ
        loss = nll.sum() / tokens.sum()
        bpb = nll.sum() / (math.log(2) * table[samples[:, 1:]].sum())
        assert tp1[ITERS][f"valid/{name}/loss"] == pytest.approx(loss, abs=1e-5), name
        assert tp1[ITERS][f"valid/{name}/bpb"] == pytest.approx(bpb, abs=1e-5), name
