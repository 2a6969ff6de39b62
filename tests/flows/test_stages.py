"""Stage markers: skip exactly when config, upstream and outputs all match; never on a partial stage."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from bloomdata import durable
from flows.stages import (
    MARKER,
    Stage,
    StageMarker,
    StageResult,
    completed,
    read_marker,
    stage_key,
    write_marker,
)


class _Cfg(BaseModel):
    vocab_size: int = 256
    langs: list[str] = ["en", "fr"]


def test_hash_is_stable_and_sensitive():
    a = stage_key(_Cfg())
    # the one content key of bloomdata.durable (canonical JSON, sha256), as the build and index cache use
    assert a == durable.content_key({"config": {"langs": ["en", "fr"], "vocab_size": 256}, "upstream": [],
                                     "inputs": {}})
    assert a == stage_key(_Cfg()) == stage_key({"langs": ["en", "fr"], "vocab_size": 256})
    assert a != stage_key(_Cfg(vocab_size=512))
    assert a != stage_key(_Cfg(langs=["fr", "en"]))  # order of languages changes the data
    assert a != stage_key(_Cfg(), upstream=["abc"])  # an upstream re-run invalidates this stage


def test_hash_folds_input_files(tmp_path):
    f = tmp_path / "corpus.jsonl"
    f.write_text('{"text": "a"}\n')
    before = stage_key(_Cfg(), inputs=[f])
    assert before == stage_key(_Cfg(), inputs=[f])
    f.write_text('{"text": "ab"}\n')
    assert stage_key(_Cfg(), inputs=[f]) != before
    assert stage_key(_Cfg(), inputs=[tmp_path]) != stage_key(_Cfg(), inputs=[tmp_path / "missing"])


def test_marker_roundtrip_and_skip_rules(tmp_path):
    out = tmp_path / "tok"
    artefact = out / "tokenizer.json"
    digest = stage_key(_Cfg())
    assert completed(out, digest) is None
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        write_marker(out, stage="tokenizer", key=digest, outputs={"tokenizer": artefact})
    assert read_marker(out) is None  # a stage whose outputs are missing is never marked done
    out.mkdir()
    artefact.write_text("{}")
    write_marker(out, stage="tokenizer", key=digest, outputs={"tokenizer": artefact},
                 result=_Cfg(vocab_size=300), config=_Cfg())
    marker = completed(out, digest)
    assert isinstance(marker, StageMarker) and marker.key == digest
    assert marker.result == {"vocab_size": 300, "langs": ["en", "fr"]} and marker.config["vocab_size"] == 256
    on_disk = json.loads((out / MARKER).read_text())
    assert on_disk["stage"] == "tokenizer" and on_disk["key"] == digest and list(on_disk)[0] == "key"
    assert read_marker(out) == marker
    assert completed(out, stage_key(_Cfg(vocab_size=512))) is None  # config changed
    artefact.unlink()
    assert completed(out, digest) is None  # output deleted by hand


def test_marker_of_another_format_or_a_torn_write_means_not_done(tmp_path):
    """A marker from before the typed format (``hash`` instead of ``key``), or garbage, is 'not done':
    the stage runs again instead of crashing or skipping."""
    out = tmp_path / "stage"
    out.mkdir()
    artefact = out / "x.txt"
    artefact.write_text("x")
    digest = stage_key(_Cfg())
    (out / MARKER).write_text(json.dumps({"stage": "s", "hash": digest, "outputs": {"x": str(artefact)}}))
    assert read_marker(out) is None and completed(out, digest) is None
    (out / MARKER).write_text('{"key": "')
    assert read_marker(out) is None and completed(out, digest) is None
    write_marker(out, stage="s", key=digest, outputs={"x": artefact})
    assert completed(out, digest).stage == "s"
    assert not [p for p in out.iterdir() if durable.TEMP_INFIX in p.name]


def test_stage_runs_once_then_reads_its_typed_result_back(tmp_path):
    """``Stage.run``: the work runs, the marker is written over its outputs; a second run with the same key is
    skipped and hands back the same typed result (publish sees it both times); another key runs again."""
    out = tmp_path / "stage"
    calls, shown = [], []

    def work() -> _Cfg:
        calls.append(1)
        out.mkdir(exist_ok=True)
        (out / "vocab.txt").write_text("x")
        return _Cfg(vocab_size=100 + len(calls))

    def run(key: str) -> StageResult[_Cfg]:
        return Stage("vocab", out, key, _Cfg, config={"n": 1}).run(
            work, outputs=lambda r: {"vocab": out / "vocab.txt"}, publish=shown.append)

    first = run("k1")
    assert isinstance(first, StageResult) and not first.skipped and first.result == _Cfg(vocab_size=101)
    assert (first.stage, first.key, first.out_dir) == ("vocab", "k1", str(out))
    again = run("k1")
    assert again.skipped and again.result == first.result and len(calls) == 1
    assert shown == [first.result, first.result]
    assert run("k2").result == _Cfg(vocab_size=102) and len(calls) == 2


def test_a_marker_whose_result_no_longer_validates_means_not_done(tmp_path):
    """A marker written by an older result shape: the stage runs again instead of handing on a wrong shape."""
    out = tmp_path / "stage"
    out.mkdir()
    (out / "x.txt").write_text("x")
    write_marker(out, stage="s", key="k", outputs={"x": out / "x.txt"}, result=StageMarker(
        key="k", stage="s", outputs={}, finished_at="then"))
    assert completed(out, "k") is not None

    class Vocab(BaseModel):
        vocab_size: int

    assert Stage("s", out, "k", Vocab).done() is None
    done = Stage("s", out, "k", Vocab).run(lambda: Vocab(vocab_size=3), outputs=lambda r: {"x": out / "x.txt"})
    assert not done.skipped and Stage("s", out, "k", Vocab).done().result == Vocab(vocab_size=3)
