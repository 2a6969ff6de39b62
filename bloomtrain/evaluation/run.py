"""``run_evaluation(config)``: read the documents once, then per model load, tokenize, score, run the tasks,
and write the report. What ``bloomtrain evaluate`` and the flows' evaluate stage call.

Models are scored one after the other and released in between, so only one is in memory at a time.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from bloomdata.errors import BloomstackError
from bloomdata.tokenizer.encoder import EncoderKind, encoder_of
from bloomtrain.evaluation.config import EvaluateConfig
from bloomtrain.evaluation.inputs import EvalDocuments, read_documents
from bloomtrain.evaluation.models import CausalLM, load_causal_lm
from bloomtrain.evaluation.report import DataSummary, EvalReport, ModelResult, Score, write_report
from bloomtrain.evaluation.scoring import Scorer, Sliding, score_documents

ENCODE_BATCH = 1000  # documents per tokenizer call


def encode(tokenizer, texts: Sequence[str], kind: EncoderKind = "auto") -> list[list[int]]:
    """Token ids of each text, without special tokens (the start token is the scorer's to add): through
    ``bloomdata.tokenizer.encoder`` when the transformers tokenizer is a fast one (same ids as its own call), else
    the tokenizer's own call."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    ids: list[list[int]] = []
    if backend is not None:
        encoder = encoder_of(backend, kind, name=f"{type(tokenizer).__name__} {getattr(tokenizer, 'name_or_path', '')}")
        for lo in range(0, len(texts), ENCODE_BATCH):
            ids += [a.tolist() for a in encoder.encode_batch(list(texts[lo:lo + ENCODE_BATCH]))]
        return ids
    for lo in range(0, len(texts), ENCODE_BATCH):
        # verbose=False: no "longer than the model's maximum length" warning; windows take care of length
        ids += tokenizer(list(texts[lo:lo + ENCODE_BATCH]), add_special_tokens=False, verbose=False)["input_ids"]
    return ids


@dataclass(frozen=True)
class ScoreOptions:
    """How ``score_model`` scores: window ``context`` and ``stride`` in tokens, ``batch_size`` windows per
    forward, a progress bar, the encoder kind (``bloomdata.tokenizer.encoder``)."""

    context: int
    stride: int
    batch_size: int = 8
    progress: bool = True
    encoder: EncoderKind = "auto"


def score_model(lm: CausalLM, docs: EvalDocuments, options: ScoreOptions) -> ModelResult:
    """Per-language and overall scores of one loaded model on ``docs``."""
    from tqdm import tqdm  # noqa: PLC0415

    context, stride = options.context, options.stride
    if lm.max_positions is not None and context > lm.max_positions:
        raise BloomstackError(f"context {context}: model {lm.name} ({lm.path}) takes at most {lm.max_positions} "
                              f"positions; set context to {lm.max_positions} or less", keys=["context"])
    langs = list(docs.texts)
    texts = [t for lang in langs for t in docs.texts[lang]]
    ids = encode(lm.tokenizer, texts, options.encoder)
    with tqdm(total=sum(len(i) for i in ids), unit="tok", desc=f"evaluate {lm.name}", file=sys.stderr,
              disable=not options.progress, dynamic_ncols=True) as bar:
        nll, tokens = score_documents(Scorer(lm.model), ids, lm.start_id, Sliding(context, stride),
                                      batch_size=options.batch_size, progress=bar)
    nbytes = np.array([len(t.encode("utf-8")) for t in texts], dtype=np.int64)
    languages: dict[str, Score] = {}
    lo = 0
    for lang in langs:
        hi = lo + len(docs.texts[lang])
        # sums in document order, in float64: the same numbers whatever the batching was
        languages[lang] = Score.of(hi - lo, int(nbytes[lo:hi].sum()), int(tokens[lo:hi].sum()), float(nll[lo:hi].sum()))
        lo = hi
    overall = Score.of(len(texts), int(nbytes.sum()), int(tokens.sum()), float(nll.sum()))
    return ModelResult(path=lm.path, start_token=lm.start_token, start_id=lm.start_id, languages=languages,
                       overall=overall)


def _release(lm: CausalLM | None) -> None:
    del lm
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def run_evaluation(config: EvaluateConfig) -> EvalReport:
    """Score every model of ``config`` on its documents (and tasks), write ``eval.json/md/png``; returns the report."""
    if config.tasks:
        from bloomtrain.evaluation.tasks import check_tasks  # noqa: PLC0415 - lm-eval only when asked

        check_tasks(config.tasks, config.task_paths)
    docs = read_documents(config.sources, config.max_docs_per_lang)
    models: dict[str, ModelResult] = {}
    scoring = ScoreOptions(config.context, config.window_stride, config.batch_size, config.progress, config.encoder)
    tasks: dict[str, dict[str, dict[str, float]]] = {}
    task_splits: dict[str, str] = {}
    for spec in config.models:
        lm = load_causal_lm(spec.path, name=spec.label, dtype=config.dtype, device=config.device)
        models[lm.name] = score_model(lm, docs, scoring)
        if config.tasks:
            from bloomtrain.evaluation.tasks import TaskOptions, run_tasks  # noqa: PLC0415 - lm-eval only when asked

            options = TaskOptions(config.task_paths, config.task_limit, config.batch_size, max_length=config.context)
            metrics, splits = run_tasks(lm, config.tasks, options)
            for task, values in metrics.items():
                tasks.setdefault(task, {})[lm.name] = values
            task_splits.update(splits)
        _release(lm)
    sources = [(f"{s.lang}=" if s.lang else "") + ",".join(s.paths) for s in config.sources]
    data = DataSummary(sources=sources, rows_read=docs.rows_read, documents=docs.documents, rejects=docs.rejects,
                       rejects_total=sum(docs.rejects.values()), reject_examples=docs.reject_examples)
    settings = {"context": config.context, "stride": config.window_stride,
                "max_docs_per_lang": config.max_docs_per_lang, "dtype": config.dtype, "task_limit": config.task_limit}
    report = EvalReport(models=models, tasks=tasks, task_splits=task_splits, data=data, settings=settings)
    write_report(report, config.out_dir)
    return report
