"""Test data shipped with the repository: tests use only files inside it (no sibling folders, no downloads).

``CORPUS_DIR``: 27 languages x 160 documents (zh: 146) of real sentences, ``{"text", "lang"}`` per line,
from the Leipzig Corpora Collection (CC BY; attribution in corpus/README.md).
"""

from pathlib import Path

CORPUS_DIR = Path(__file__).resolve().parent / "corpus"
