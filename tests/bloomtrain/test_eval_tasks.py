"""Downstream tasks through lm-evaluation-harness, offline: a multiple-choice task defined here (a YAML and a
jsonl written into tmp_path, loaded through lm-eval's include path) and checked against a direct computation:
each choice's log-likelihood scored with the model itself (``model(ids).logits.log_softmax(-1)``), argmax,
compared with the gold answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from bloomtrain.cli import main as bloomtrain_main
from bloomtrain.evaluation.models import load_causal_lm
from bloomtrain.evaluation.tasks import TaskOptions, check_tasks, evaluate_tasks, task_manager, task_metrics
from tests.bloomtrain.conftest import build_hf_bloom, write_tiny_tokenizer
from tests.data import CORPUS_DIR

TASK = "bloomstack_mc"
N_DOCS = 12


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "tiny"
    build_hf_bloom(n_head=4, n_layer=2, hidden=64, vocab=272, seed=3).save_pretrained(out)
    write_tiny_tokenizer(out)
    return out


def _mc_docs() -> list[dict]:
    """Question: a sentence's start; choices: its true continuation and three other sentences' (gold rotates)."""
    with (CORPUS_DIR / "en.jsonl").open(encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for _, line in zip(range(N_DOCS + 3), f)]
    docs = []
    for i in range(N_DOCS):
        label = i % 4
        others = [texts[(i + k) % len(texts)][40:60].strip() for k in (1, 2, 3)]
        choices = others[:label] + [texts[i][40:60].strip()] + others[label:]
        docs.append({"question": texts[i][:40].strip(), "choices": choices, "label": label})
    return docs


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    data = root / "mc.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in _mc_docs()), encoding="utf-8")
    (root / f"{TASK}.yaml").write_text(f"""\
task: {TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
  cache_dir: {root / 'hf_cache'}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: label
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
  - metric: acc_norm
    aggregation: mean
    higher_is_better: true
""", encoding="utf-8")
    # a task whose data lives on the Hub and is not in any local cache
    (root / "bloomstack_remote.yaml").write_text("""\
task: bloomstack_remote
dataset_path: bloomstack-tests/not-a-cached-dataset
test_split: test
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: label
metric_list:
  - metric: acc
""", encoding="utf-8")
    return root


def _direct_loglikelihoods(model, tokenizer, context: str, continuation: str) -> float:
    """log p(continuation | context): the whole text's tokens after the context's own tokens."""
    ctx = tokenizer(context, add_special_tokens=False)["input_ids"]
    whole = tokenizer(context + continuation, add_special_tokens=False)["input_ids"]
    cont = whole[len(ctx):]
    with torch.no_grad():
        logp = model(torch.tensor([whole[:-1]])).logits[0].float().log_softmax(-1)
    return float(sum(logp[len(ctx) - 1 + i, tok] for i, tok in enumerate(cont)))


def test_harness_accuracy_equals_a_direct_computation(model_dir, task_dir):
    lm = load_causal_lm(model_dir, device="cpu")
    results = evaluate_tasks(lm, [TASK], TaskOptions([str(task_dir)], batch_size=4, log_samples=True))
    docs = _mc_docs()
    correct, correct_norm = [], []
    samples = sorted(results["samples"][TASK], key=lambda s: s["doc_id"])
    assert len(samples) == N_DOCS
    for doc, sample in zip(docs, samples):
        ll = np.array([_direct_loglikelihoods(lm.model, lm.tokenizer, doc["question"], " " + c)
                       for c in doc["choices"]])
        harness = np.array([r[0][0] for r in sample["resps"]])  # (loglikelihood, is_greedy) per choice
        np.testing.assert_allclose(harness, ll, rtol=1e-5)
        correct.append(int(np.argmax(ll)) == doc["label"])
        lengths = np.array([len(" " + c) for c in doc["choices"]])  # acc_norm: per character of the choice
        correct_norm.append(int(np.argmax(ll / lengths)) == doc["label"])
    metrics = task_metrics(results)[TASK]
    assert metrics["acc"] == pytest.approx(np.mean(correct))
    assert metrics["acc_norm"] == pytest.approx(np.mean(correct_norm))
    assert 0 < sum(correct) < N_DOCS  # not a degenerate all-right / all-wrong case


def test_cli_merges_task_accuracy_into_eval_json_and_md(model_dir, task_dir, tmp_path, capsys):
    out = tmp_path / "out"
    code = bloomtrain_main(["evaluate", "--model", f"m={model_dir}", "--data", f"en={CORPUS_DIR / 'en.jsonl'}",
                            "--max-docs-per-lang", "2", "--context", "32", "--out", str(out), "--device", "cpu",
                            "--no-progress", "--tasks", TASK, "--task-path", str(task_dir), "--task-limit", "8",
                            "--json"])
    assert code == 0, capsys.readouterr().err
    report = json.loads((out / "eval.json").read_text())
    acc = report["tasks"][TASK]["m"]["acc"]
    assert report["task_splits"] == {TASK: "test"}  # the split the model card names
    assert acc in {k / 8 for k in range(9)}  # 8 examples (--task-limit)
    assert json.loads(capsys.readouterr().out)["tasks"][TASK]["m"]["acc"] == acc
    md = (out / "eval.md").read_text()
    assert f"| {TASK} | acc | **{acc:.4f}** |" in md


def test_task_data_not_available_offline_is_a_one_line_error(model_dir, task_dir, tmp_path, capsys):
    for task in ("bloomstack_remote", "xstorycloze_en"):
        code = bloomtrain_main(["evaluate", "--model", str(model_dir), "--data", f"en={CORPUS_DIR / 'en.jsonl'}",
                                "--max-docs-per-lang", "1", "--context", "16", "--out", str(tmp_path / "o"),
                                "--device", "cpu", "--no-progress", "--tasks", task, "--task-path", str(task_dir)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2
        assert f"--tasks {task}: its data is not available offline" in err[-1], err[-1]
        assert "HF_DATASETS_OFFLINE=0" in err[-1]


def test_a_task_lm_eval_does_not_know_fails_before_any_model_loads(task_dir, tmp_path, capsys, monkeypatch):
    def no_model(*_, **__):
        raise AssertionError("a model was loaded before the task names were checked")

    monkeypatch.setattr("bloomtrain.evaluation.run.load_causal_lm", no_model)
    code = bloomtrain_main(["evaluate", "--model", str(tmp_path / "never-read"), "--data",
                            f"en={CORPUS_DIR / 'en.jsonl'}", "--out", str(tmp_path / "o"), "--device", "cpu",
                            "--no-progress", "--tasks", f"{TASK},no_such_task", "--task-path", str(task_dir)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "--tasks no_such_task: not an lm-eval task, group or tag" in err[0], err


class _CountedManager:
    """Stands in for lm-eval's TaskManager: records each index build (the real one parses ~14,000 YAMLs with lm-eval's
    own tasks); a task is named after its YAML file, and lm-eval's own tasks are "xnli" here."""

    built: list[tuple[list[str], bool]] = []

    def __init__(self, include_path=None, include_defaults=True):
        self.built.append((list(include_path or []), include_defaults))
        self.all_subtasks = [p.stem for d in include_path or [] for p in sorted(Path(d).glob("**/*.yaml"))]
        self.all_tasks = self.all_subtasks + (["xnli"] if include_defaults else [])


def test_the_task_index_is_built_once_per_process_until_a_yaml_changes(tmp_path, monkeypatch):
    import lm_eval.tasks

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", _CountedManager)
    built = _CountedManager.built
    built.clear()
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "a.yaml").write_text("task: a\n")
    first = task_manager([str(tasks)], ["a"])
    assert task_manager([str(tasks)], ["a"]) is first  # a second model, the same index
    assert built == [([str(tasks)], False)]  # a local task: lm-eval's own ~14,000 YAMLs are not read
    full = task_manager([str(tasks)], ["a", "xnli"])  # one of lm-eval's own: both
    assert built[-1] == ([str(tasks)], True) and "xnli" in full.all_tasks
    (tasks / "sub").mkdir()
    (tasks / "sub" / "b.yaml").write_text("task: b\n")  # an added YAML: a new index that has it
    check_tasks(["a", "b"], [str(tasks)])
    (tasks / "a.yaml").write_text("task: a2\n")  # a YAML rewritten in place (another size): a new index
    assert task_manager([str(tasks)], ["a"]).all_tasks == ["a", "b"] and len(built) == 4
    (tmp_path / "other").mkdir()
    assert task_manager([str(tmp_path / "other")], ["a"]) is not first  # other directories, another index
    assert built[-1] == ([str(tmp_path / "other")], True)  # "a" is not there: lm-eval's own tasks are read
