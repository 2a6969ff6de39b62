"""The index cache: hits, keys, truncation and corruption detected and rebuilt, eight concurrent builders."""

from __future__ import annotations

import glob
import json
import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from bloomdata import durable
from bloomdata.megatron.blend import build_blend
from bloomdata.megatron.gpt_samples import GPTSamples, SampleSettings
from tests.bloomdata.megatron_oracle import write_dataset

NAMES = ["document_index", "sample_index", "shuffle_index"]


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    return write_dataset(tmp_path_factory.mktemp("cache") / "ds", num_docs=400, seed=3)


def _samples(prefix, cache, **kw):
    args = {"seq_length": 16, "seed": 5, "cache_dir": cache, **kw}
    split, name = args.pop("split", "90,8,2"), args.pop("split_name", "train")
    num_samples = args.pop("num_samples", 2000)
    return GPTSamples(prefix, num_samples, SampleSettings(**args), split, name)


def _assert_equal(a: GPTSamples, b: GPTSamples):
    for name in NAMES:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def test_hit_after_build_and_files_described(prefix, tmp_path):
    first = _samples(prefix, tmp_path)
    second = _samples(prefix, tmp_path)
    assert first.built and not second.built
    _assert_equal(first, second)
    _assert_equal(first, _samples(prefix, None))
    record = json.loads(open(first.cache.description_path).read())
    assert record["description"]["seed"] == 5 and record["description"]["compat"] == "core"
    assert record["key"] == first.cache.key == durable.content_key(record["description"])
    for name in NAMES:
        path = first.cache.array_path(name)
        entry = record["files"][name]
        assert entry["bytes"] == os.path.getsize(path)
        on_disk = np.load(path)  # the digest taken in memory while saving is the digest of the file's data
        assert entry["digest"] == durable.digest(on_disk) == durable.digest(getattr(first, name))
        assert entry["dtype"] == on_disk.dtype.str and entry["shape"] == list(on_disk.shape)
    assert not glob.glob(str(tmp_path / "*.tmp-*"))


@pytest.mark.parametrize(
    "change",
    [{"seed": 6}, {"num_samples": 2001}, {"seq_length": 17}, {"split": "80,18,2"}, {"compat": "bloom"},
     {"tokenizer_id": "bloom-250k"}, {"split_name": "valid"}],
)
def test_key_covers_everything_that_determines_the_arrays(prefix, tmp_path, change):
    base = _samples(prefix, tmp_path)
    other = _samples(prefix, tmp_path, **change)
    assert other.built and other.cache.stem != base.cache.stem


@pytest.mark.parametrize("damage", ["truncate", "flip", "drop_description", "garbage_description"])
def test_damaged_cache_is_detected_and_rebuilt(prefix, tmp_path, damage):
    good = _samples(prefix, tmp_path)
    path = good.cache.array_path("shuffle_index")
    if damage == "truncate":
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
    elif damage == "flip":  # same size, zeroed middle: only the checksum can tell
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            f.write(b"\x00" * 64)
    elif damage == "drop_description":
        os.remove(good.cache.description_path)
    else:
        open(good.cache.description_path, "w").write("{not json")
    again = _samples(prefix, tmp_path)
    assert again.built
    _assert_equal(again, _samples(prefix, None))
    assert not _samples(prefix, tmp_path).built


def test_one_flipped_bit_is_caught_by_the_digest(prefix, tmp_path, caplog):
    """Same size, valid header, one bit flipped in the data: only the xxh3 digest can tell (without the
    check the corrupt array is served)."""
    good = _samples(prefix, tmp_path)
    reference = np.array(good.sample_index)
    path = good.cache.array_path("sample_index")
    with open(path, "r+b") as f:
        f.seek(-5, os.SEEK_END)
        byte = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x10]))
    unchecked = _samples(prefix, tmp_path, verify_cache=False)
    assert not unchecked.built and not np.array_equal(unchecked.sample_index, reference)
    del unchecked
    with caplog.at_level(logging.WARNING, logger="bloomdata.megatron.index_cache"):
        again = _samples(prefix, tmp_path)
    assert again.built and "digest mismatch" in caplog.text
    np.testing.assert_array_equal(again.sample_index, reference)
    assert not _samples(prefix, tmp_path).built


def test_stray_temp_files_of_a_dead_builder_are_removed(prefix, tmp_path):
    first = _samples(prefix, tmp_path)
    stray = f"{first.cache.array_path('shuffle_index')}{durable.TEMP_INFIX}999999-deadbeef"
    other = str(tmp_path / f"ffff-GPTSamples-train-shuffle_index.npy{durable.TEMP_INFIX}1-0")  # another key's
    open(stray, "wb").write(b"junk")
    open(other, "wb").write(b"junk")
    os.remove(first.cache.description_path)
    assert _samples(prefix, tmp_path).built
    assert not os.path.exists(stray) and os.path.exists(other)


_WORKER = """
import hashlib, json, sys, time
from bloomdata.megatron.gpt_samples import GPTSamples, SampleSettings
prefix, cache, start = sys.argv[1], sys.argv[2], float(sys.argv[3])
while time.time() < start:
    time.sleep(0.001)
s = GPTSamples(prefix, 200_000, SampleSettings(16, 5, cache_dir=cache), "90,8,2", "train")
digest = hashlib.sha256(b"".join(getattr(s, n).tobytes() for n in ("document_index", "sample_index", "shuffle_index")))
print(json.dumps({"built": s.built, "sha": digest.hexdigest()}))
"""


@pytest.mark.integration
def test_eight_processes_build_once_and_agree(prefix, tmp_path):
    start = time.time() + 3.0  # all eight imported and waiting, then released together
    procs = [
        subprocess.Popen([sys.executable, "-c", _WORKER, prefix, str(tmp_path), str(start)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(8)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sum(r["built"] for r in results) == 1
    assert len({r["sha"] for r in results}) == 1
    assert len(glob.glob(str(tmp_path / "*-GPTSamples-train-*.npy"))) == 3


def test_blend_cache_roundtrip(tmp_path):
    prefixes = [write_dataset(tmp_path / f"l{k}", num_docs=120, seed=k) for k in range(2)]
    cache = tmp_path / "cache"
    first = build_blend(prefixes, [0.7, 0.3], 500, SampleSettings(16, 1, cache_dir=cache), "90,8,2")
    second = build_blend(prefixes, [0.7, 0.3], 500, SampleSettings(16, 1, cache_dir=cache), "90,8,2")
    assert first.built and not second.built and not any(s.built for s in second.samples)
    np.testing.assert_array_equal(first.dataset_index, second.dataset_index)
    np.testing.assert_array_equal(first.dataset_sample_index, second.dataset_sample_index)
    third = build_blend(prefixes, [0.6, 0.4], 500, SampleSettings(16, 1, cache_dir=cache), "90,8,2")
    assert third.built
