"""`python -m bloomdata.cli.demo`: trains a tokenizer, builds per-language datasets with 2 Dask workers and
--append-eod, and ends by printing the build summary (run as `make demo` runs it, in a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bloomdata.megatron.indexed import IndexedDataset

pytestmark = pytest.mark.integration  # tests/tiers.py

REPO = Path(__file__).resolve().parents[2]


def test_demo_end_to_end(tmp_path, corpus_dir):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for lang in ("en", "hi", "zh"):
        (corpus / f"{lang}.jsonl").write_bytes((corpus_dir / f"{lang}.jsonl").read_bytes())
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "bloomdata.cli.demo", "--out", str(out), "--corpus", str(corpus),
                           "--vocab-size", "1000", "--no-progress"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.strip().splitlines()
    assert last[0].startswith("build summary") and "tokens/s" in last[-1]
    summary = json.loads((out / "data" / "build_summary.json").read_text())
    assert sorted(summary["outputs"]) == ["en", "hi", "zh"] and summary["workers"] == 2
    assert summary["append_eod"] and summary["dtype"] == "uint16"
    for lang, n_docs in (("en", 160), ("hi", 160), ("zh", 146)):
        ds = IndexedDataset(out / "data" / lang)
        assert ds.num_documents == n_docs and all(int(ds[i][-1]) == 2 for i in range(n_docs))  # </s>
        assert f"  {lang} " in proc.stdout
    assert (out / "tokenizer" / "tokenizer.json").is_file()
