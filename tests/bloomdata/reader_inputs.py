"""Input files the reader tests write: the same 1,037 rows in every supported format."""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

ROWS = [{"text": f"document {i} — ünïcode ✓ 文字", "lang": ["en", "fr", "zh"][i % 3]} for i in range(1037)]


def _jsonl_bytes(rows, trailing_newline=True) -> bytes:
    body = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows)
    return (body + ("\n" if trailing_newline else "")).encode("utf-8")


def write_rows(tmp_path, kind: str, rows=ROWS, name="data") -> str:
    """Write rows in one of the supported formats; returns the path (file or directory)."""
    table = pa.Table.from_pylist(rows)
    path = tmp_path / f"{name}.{kind}"
    if kind == "jsonl":
        path.write_bytes(_jsonl_bytes(rows))
    elif kind == "jsonl.gz":
        path.write_bytes(gzip.compress(_jsonl_bytes(rows)))
    elif kind == "jsonl.zst":
        path.write_bytes(zstandard.ZstdCompressor().compress(_jsonl_bytes(rows)))
    elif kind == "jsonl.bz2":
        path.write_bytes(bz2.compress(_jsonl_bytes(rows)))
    elif kind == "jsonl.xz":
        path.write_bytes(lzma.compress(_jsonl_bytes(rows)))
    elif kind in ("json-array", "json-array.gz"):  # a top-level array, pretty-printed as HF's to_json(lines=False)
        path = tmp_path / (f"{name}.json" + (".gz" if kind.endswith(".gz") else ""))
        data = json.dumps(rows, ensure_ascii=False, indent=2).encode("utf-8")
        path.write_bytes(gzip.compress(data) if kind.endswith(".gz") else data)
    elif kind == "json-lines":  # JSON Lines named .json (HF's to_json default)
        path = tmp_path / f"{name}.json"
        path.write_bytes(_jsonl_bytes(rows))
    elif kind in ("csv", "tsv"):
        out = io.StringIO(newline="")
        fields = list(dict.fromkeys(k for r in rows for k in r))
        writer = csv.DictWriter(out, fields, delimiter="," if kind == "csv" else "\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        path.write_bytes(out.getvalue().encode("utf-8"))
    elif kind == "parquet":
        pq.write_table(table, path, row_group_size=128)
    elif kind in ("arrow-file", "arrow-stream"):
        path = tmp_path / f"{name}-{kind}.arrow"
        opener = pa.ipc.new_file if kind == "arrow-file" else pa.ipc.new_stream
        with opener(str(path), table.schema) as writer:
            for batch in table.to_batches(max_chunksize=100):
                writer.write_batch(batch)
    elif kind == "hf":
        datasets = pytest.importorskip("datasets")
        path = tmp_path / f"{name}-hf"
        datasets.Dataset.from_list(rows).save_to_disk(str(path), max_shard_size="20KB")
    else:
        raise AssertionError(kind)
    return str(path)


FORMATS = ["jsonl", "jsonl.gz", "jsonl.zst", "jsonl.bz2", "jsonl.xz", "json-array", "json-array.gz", "json-lines",
           "csv", "tsv", "parquet", "arrow-file", "arrow-stream", "hf"]
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark
