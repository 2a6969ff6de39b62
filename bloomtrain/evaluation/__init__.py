"""Evaluation of causal LMs: bits per byte per language on held-out text, and downstream tasks.

- ``config.py``: ``EvaluateConfig`` (the one model of ``bloomtrain evaluate``), ``ModelSpec`` (``[NAME=]DIR``);
- ``inputs.py``: ``read_documents`` -> texts per language from any input the build reads, rejects counted;
- ``models.py``: ``load_causal_lm`` -> a transformers model + tokenizer + its document-start token;
- ``scoring.py``: ``Scorer``, ``score_documents`` (sliding window), ``score_sequences`` (training samples);
- ``report.py``: ``EvalReport`` and ``eval.json`` / ``eval.md`` / ``eval.png``;
- ``tasks.py``: lm-evaluation-harness tasks on the loaded model (optional ``eval`` extra);
- ``run.py``: ``run_evaluation(config)``, all of the above.
"""

from bloomtrain.evaluation.config import EvaluateConfig, ModelSpec
from bloomtrain.evaluation.inputs import EvalDocuments, read_documents
from bloomtrain.evaluation.models import CausalLM, document_start, load_causal_lm
from bloomtrain.evaluation.report import EvalReport, ModelResult, Score, write_report
from bloomtrain.evaluation.run import encode, run_evaluation, score_model
from bloomtrain.evaluation.scoring import (
    Scorer,
    Sliding,
    Window,
    document_windows,
    score_documents,
    score_sequences,
)

__all__ = [
    "CausalLM", "EvalDocuments", "EvalReport", "EvaluateConfig", "ModelResult", "ModelSpec", "Score", "Scorer", "Sliding",
    "Window", "document_start", "document_windows", "encode", "load_causal_lm", "read_documents", "run_evaluation",
    "score_documents", "score_model", "score_sequences", "write_report",
]
