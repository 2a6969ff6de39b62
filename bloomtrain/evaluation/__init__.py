"""Evaluation of causal LMs: bits per byte per language on held-out text, and downstream tasks.

- ``config.py``: ``EvaluateConfig`` (the one model of ``bloomtrain evaluate``), ``ModelSpec`` (``[NAME=]DIR``);
- ``inputs.py``: ``read_documents`` -> texts per language from any input the build reads, rejects counted;
- ``models.py``: ``load_causal_lm`` -> a transformers model + tokenizer + its document-start token;
- ``scoring.py``: ``Scorer``, ``score_documents`` (sliding window), ``score_sequences`` (training samples);
- ``report.py``: ``EvalReport`` and ``eval.json`` / ``eval.md`` / ``eval.png``;
- ``tasks.py``: lm-evaluation-harness tasks on the loaded model (optional ``eval`` extra);
- ``run.py``: ``run_evaluation(config)``, all of the above.

Import from those modules: this package imports nothing, so that ``config`` (read by the flows and the CLI)
does not bring torch and transformers with it.
"""
