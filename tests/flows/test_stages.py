"""Stage markers: skip exactly when config, upstream and outputs all match; never on a partial stage."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from bloomdata import durable
from flows.stages import MARKER, StageMarker, completed, config_hash, invalidate, read_marker, write_marker


class _Cfg(BaseModel):
    vocab_size: int = 256
    langs: list[str] = ["en", "fr"]


def test_hash_is_stable_and_sensitive():
    a = config_hash(_Cfg())
    # the one content key of bloomdata.durable (canonical JSON, sha256), as the build and index cache use
    assert a == durable.content_key({"config": {"langs": ["en", "fr"], "vocab_size": 256}, "upstream": [],
                                     "inputs": {}})
    assert a == config_hash(_Cfg()) == config_hash({"langs": ["en", "fr"], "vocab_size": 256})
    assert a != config_hash(_Cfg(vocab_size=512))
    assert a != config_hash(_Cfg(langs=["fr", "en"]))  # order of languages changes the data
    assert a != config_hash(_Cfg(), upstream=["abc"])  # an upstream re-run invalidates this stage


def test_hash_folds_input_files(tmp_path):
    f = tmp_path / "corpus.jsonl"
    f.write_text('{"text": "a"}\n')
    before = config_hash(_Cfg(), inputs=[f])
    assert before == config_hash(_Cfg(), inputs=[f])
    f.write_text('{"text": "ab"}\n')
    assert config_hash(_Cfg(), inputs=[f]) != before
    assert config_hash(_Cfg(), inputs=[tmp_path]) != config_hash(_Cfg(), inputs=[tmp_path / "missing"])


def test_marker_roundtrip_and_skip_rules(tmp_path):
    out = tmp_path / "tok"
    artefact = out / "tokenizer.json"
    digest = config_hash(_Cfg())
    assert completed(out, digest) is None
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        write_marker(out, stage="tokenizer", digest=digest, outputs={"tokenizer": artefact})
    assert read_marker(out) is None  # a stage whose outputs are missing is never marked done
    out.mkdir()
    artefact.write_text("{}")
    write_marker(out, stage="tokenizer", digest=digest, outputs={"tokenizer": artefact},
                 summary={"vocab": 256}, config=_Cfg())
    marker = completed(out, digest)
    assert isinstance(marker, StageMarker) and marker.key == digest
    assert marker.summary == {"vocab": 256} and marker.config["vocab_size"] == 256
    on_disk = json.loads((out / MARKER).read_text())
    assert on_disk["stage"] == "tokenizer" and on_disk["key"] == digest and list(on_disk)[0] == "key"
    assert read_marker(out) == marker
    assert completed(out, config_hash(_Cfg(vocab_size=512))) is None  # config changed
    artefact.unlink()
    assert completed(out, digest) is None  # output deleted by hand
    artefact.write_text("{}")
    invalidate(out)
    assert completed(out, digest) is None


def test_marker_of_another_format_or_a_torn_write_means_not_done(tmp_path):
    """A marker from before the typed format (``hash`` instead of ``key``), or garbage, is 'not done':
    the stage runs again instead of crashing or skipping."""
    out = tmp_path / "stage"
    out.mkdir()
    artefact = out / "x.txt"
    artefact.write_text("x")
    digest = config_hash(_Cfg())
    (out / MARKER).write_text(json.dumps({"stage": "s", "hash": digest, "outputs": {"x": str(artefact)}}))
    assert read_marker(out) is None and completed(out, digest) is None
    (out / MARKER).write_text('{"key": "')
    assert read_marker(out) is None and completed(out, digest) is None
    write_marker(out, stage="s", digest=digest, outputs={"x": artefact})
    assert completed(out, digest).stage == "s"
    assert not [p for p in out.iterdir() if durable.TEMP_INFIX in p.name]
