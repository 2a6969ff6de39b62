"""clean_flow on a small corpus built here from demo documents (in-process, ``workers: 0``): the cleaned shards,
the removals and redactions the library reports, the artifacts, the sources the next stages read, and the
skip when nothing changed (a changed input re-runs it)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bloomdata.clean import CleanSummary
from bloomdata.readers import SourceConfig
from bloomtrain.evaluation.inputs import read_documents
from flows.clean import clean_flow, cleaned_sources
from flows.config import DEMO_CORPUS, CleanStageConfig
from flows.stages import MARKER
from tests.flows.prefect_api import artifact

pytestmark = pytest.mark.integration  # tests/tiers.py


def _demo(lang: str, begin: int, end: int) -> list[str]:
    with gzip.open(DEMO_CORPUS / f"{lang}.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f][begin:end]


def _write(path: Path, texts: list[str]) -> None:
    path.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts), encoding="utf-8")


def test_clean_flow_report_artifacts_sources_and_skip(prefect_harness, tmp_path):
    en, yo = _demo("en", 20, 40), _demo("yo", 0, 10)  # documents without addresses
    pii = "For the minutes of the spring meeting write to {} or use the archive server at {} before Friday."
    planted = [en[3],  # an exact copy of a document before it: the later copy goes
               pii.format("jane.doe@example.org", "192.168.10.20"),  # addresses: redacted
               "too short"]  # under min_words: removed
    _write(tmp_path / "en.jsonl", en + planted)
    _write(tmp_path / "yo.jsonl", yo)
    sources = [SourceConfig(paths=[str(tmp_path / f"{lang}.jsonl")], lang=lang) for lang in ("en", "yo")]
    config = CleanStageConfig(sources=sources, out_dir=str(tmp_path / "clean"), workers=0)
    result = clean_flow(config)

    summary = result.result
    assert summary == CleanSummary.model_validate_json((tmp_path / "clean" / "clean_summary.json").read_text())
    en_counts = summary.languages["en"]
    assert (en_counts.documents_in, en_counts.documents_kept) == (23, 21)
    assert en_counts.removed == {"too_few_words": 1, "exact_duplicate": 1}
    assert (en_counts.emails_redacted, en_counts.ips_redacted) == (1, 1)
    assert summary.languages["yo"].documents_kept == 10
    # What the tokenizer and the build read next: the cleaned shards, one source per language.
    cleaned = read_documents(cleaned_sources(result)).texts
    assert cleaned["en"][:20] == en and cleaned["yo"] == yo  # clean demo text passes unchanged, in order
    assert cleaned["en"][20] == pii.format("PI:EMAIL", "PI:IP_ADDRESS")
    assert [s.paths for s in cleaned_sources(result)] == [[str(tmp_path / "clean" / "data" / lang)]
                                                          for lang in ("en", "yo")]

    rows = {r["language"]: r for r in json.loads(artifact("clean-report").data)}
    assert rows["en"] == {"language": "en", "documents in": 23, "kept": 21, "bytes in": en_counts.bytes_in,
                          "bytes kept": en_counts.bytes_kept, "removed: too_few_words": 1,
                          "removed: exact_duplicate": 1, "e-mails redacted": 1, "IPs redacted": 1}
    assert rows["total"]["documents in"] == 33 and rows["total"]["kept"] == 31
    chart = artifact("clean-chart").data
    assert "31 of 33 documents kept" in chart and "![clean](data:image/png;base64," in chart

    # Rerun: skipped (nothing rewritten), its artifacts published again from the marker.
    stamp = (tmp_path / "clean" / MARKER).stat().st_mtime_ns
    skipped = clean_flow(config)
    assert skipped.skipped and skipped.result == result.result and skipped.key == result.key
    assert (tmp_path / "clean" / MARKER).stat().st_mtime_ns == stamp
    # An input edited in place re-runs it.
    _write(tmp_path / "yo.jsonl", yo[:9])
    again = clean_flow(config)
    assert again.key != result.key and again.result.languages["yo"].documents_kept == 9
