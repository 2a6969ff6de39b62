"""`bloomdata inspect PREFIX`: what is inside a Megatron ``.bin/.idx`` dataset.

Prints the counts (sequences, documents, tokens), the dtype, file sizes, sequence-length statistics and a
text histogram with power-of-two bins, then the first documents: decoded with ``--tokenizer``, else as
token ids. Reads through ``IndexedDataset`` (memory-mapped), so a truncated or corrupt file is reported
as one line naming it, and inspecting a dataset of any size costs O(sequences) for the statistics only.

PREFIX may be any fsspec URL (``s3://bucket/data/en``, ``https://host/data/en``, ``gs://``, ``hf://``): the .idx is
read whole, the documents shown by byte ranges of the .bin (one ranged request each), with credentials and
endpoints from the protocol's standard environment, as for the other commands' remote inputs.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from bloomdata.cli.options import FLAGS_ONLY, ConfigParser
from bloomdata.config_loader import cli_option
from bloomdata.megatron.indexed import CODE_OF_DTYPE, IndexedDataset

BAR_WIDTH = 40


def _prefix(path: str) -> str:
    """Accept PREFIX, PREFIX.bin or PREFIX.idx."""
    for suffix in (".bin", ".idx"):
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


def length_histogram(sizes: np.ndarray) -> list[tuple[int, int, int]]:
    """(lo, hi, count) for power-of-two bins [2^k, 2^(k+1)) from the shortest sequence's bin to the
    longest's (empty bins between them included); length-0 sequences fall in a [0, 1) bin."""
    if len(sizes) == 0:
        return []
    lo_bit = max(int(sizes.min()), 1).bit_length() - 1
    hi_bit = max(int(sizes.max()), 1).bit_length()
    edges = ([0] if sizes.min() == 0 else []) + [1 << k for k in range(lo_bit, hi_bit + 1)]
    counts = np.histogram(sizes, bins=edges)[0]
    return [(lo, hi, int(n)) for lo, hi, n in zip(edges[:-1], edges[1:], counts)]


def describe(ds: IndexedDataset) -> dict[str, Any]:
    sizes = ds.sizes
    stats: dict[str, Any] = {
        "prefix": ds.prefix,
        "dtype": ds.dtype.name,
        "dtype_code": CODE_OF_DTYPE[ds.dtype],
        "sequences": len(ds),
        "documents": ds.num_documents,
        "tokens": ds.num_tokens,
        "bin_bytes": ds.bin_bytes,
        "idx_bytes": ds.idx_bytes,
    }
    if len(sizes):
        stats["length"] = {"min": int(sizes.min()), "mean": round(float(sizes.mean()), 2),
                           "median": float(np.median(sizes)), "p90": float(np.percentile(sizes, 90)),
                           "max": int(sizes.max())}
    stats["histogram"] = [{"lo": lo, "hi": hi, "count": n} for lo, hi, n in length_histogram(sizes)]
    return stats


def document_tokens(ds: IndexedDataset, d: int) -> np.ndarray:
    """All tokens of document d (its sequences concatenated; one sequence per document in our builds)."""
    lo, hi = int(ds.document_indices[d]), int(ds.document_indices[d + 1])
    parts = [ds[i] for i in range(lo, hi)]
    return np.concatenate(parts) if parts else np.zeros(0, ds.dtype)


def format_report(stats: dict[str, Any], docs: list[tuple[int, np.ndarray, str | None]], chars: int) -> str:
    lines = [
        f"dataset    {stats['prefix']}",
        f"files      .bin {stats['bin_bytes']:,} B, .idx {stats['idx_bytes']:,} B",
        f"dtype      {stats['dtype']} (code {stats['dtype_code']})",
        f"sequences  {stats['sequences']:,}",
        f"documents  {stats['documents']:,}",
        f"tokens     {stats['tokens']:,}",
    ]
    if "length" in stats:
        lg = stats["length"]
        lines.append(f"length     min {lg['min']:,}  mean {lg['mean']:,.1f}  median {lg['median']:,.0f}  "
                     f"p90 {lg['p90']:,.0f}  max {lg['max']:,} tokens per sequence")
        lines.append("histogram  (tokens per sequence)")
        peak = max(b["count"] for b in stats["histogram"]) or 1
        for b in stats["histogram"]:
            bar = "#" * round(BAR_WIDTH * b["count"] / peak)
            lines.append(f"  [{b['lo']:>8,}, {b['hi']:>8,})  {b['count']:>10,}  {bar}")
    if docs:
        lines.append(f"first {len(docs)} document(s)")
    for d, tokens, text in docs:
        if text is None:
            shown = " ".join(str(t) for t in tokens[: max(chars // 4, 8)])
            more = " ..." if len(tokens) > max(chars // 4, 8) else ""
            lines.append(f"  [{d}] {len(tokens):,} tokens: {shown}{more}")
        else:
            shown = text[:chars] + ("..." if len(text) > chars else "")
            lines.append(f"  [{d}] {len(tokens):,} tokens: {json.dumps(shown, ensure_ascii=False)}")
    return "\n".join(lines)


class InspectConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prefix: str = Field(description="dataset prefix (PREFIX.bin/.idx; the .bin or .idx path also works; "
                        "a local path or an fsspec URL: s3://bucket/data/en)",
                        json_schema_extra=cli_option(positional=True, metavar="PREFIX"))
    tokenizer: str | None = Field(default=None,
                                  description="tokenizer.json or directory, to decode the first documents")
    docs: int = Field(default=3, description="how many documents to show")
    chars: int = Field(default=200, description="characters shown per document")


def parser() -> ConfigParser[InspectConfig]:
    p = ConfigParser(InspectConfig, "bloomdata inspect", __doc__.split("\n\n")[0], sources=FLAGS_ONLY)
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    return p


def main(argv: list[str]) -> int:
    config, args = parser().parse(argv)
    ds = IndexedDataset(_prefix(config.prefix))
    stats = describe(ds)
    tok = None
    if config.tokenizer:
        from bloomdata.tokenizer.bpe import load_tokenizer

        tok = load_tokenizer(config.tokenizer)
    docs = []
    for d in range(min(max(config.docs, 0), ds.num_documents)):
        tokens = document_tokens(ds, d)
        text = tok.decode(tokens.tolist(), skip_special_tokens=False) if tok is not None else None
        docs.append((d, tokens, text))
    if args.json:
        stats["first_documents"] = [{"document": d, "tokens": len(t), "text": x, "ids": t[:64].tolist()}
                                    for d, t, x in docs]
        print(json.dumps(stats, indent=1, ensure_ascii=False))
    else:
        print(format_report(stats, docs, config.chars))
    return 0
