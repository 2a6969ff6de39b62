"""The build's ``--dry-run`` estimate of its outputs: each ``OUT_DIR/<name>.bin/.idx``, sized from a sample.

The first ``SAMPLE_CHARS`` characters of each of the first ``SAMPLE_FILES`` input files (plan order) are read
and tokenized as the build would (its encoder, same output naming, EOD appended when asked): a file read to
its end counts exactly; one cut short is scaled up (``bloomdata.dry_run.scale_to_file``); files past the first
``SAMPLE_FILES`` are taken to be like the sampled ones. The ``.idx`` is Megatron's: a 34-byte header, then per
document an int32 length, an int64 pointer and an int64 document index entry (plus one).
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np

from bloomdata.build.config import REJECTS_FILE, SUMMARY_FILE, BuildConfig
from bloomdata.dry_run import SAMPLE_FILES, PlannedFile, sample_documents, scale_to_file
from bloomdata.megatron.indexed import HEADER_SIZE, data_file_path, index_file_path
from bloomdata.readers import Shard, input_bytes, output_name_of
from bloomdata.tokenizer.encoder import TextEncoder


def idx_bytes(documents: int) -> int:
    """A Megatron ``.idx`` of ``documents`` one-sequence documents: header, sizes, pointers, document index."""
    return HEADER_SIZE + 4 * documents + 8 * documents + 8 * (documents + 1)


def _sample(config: BuildConfig, shard: Shard, encoder: TextEncoder) -> tuple[Counter[str], Counter[str]]:
    """(tokens, documents) per output name of one file, scaled to the whole file."""
    sample, complete = sample_documents(shard)
    names = [config.output_name if config.split_by == "none" else output_name_of(doc.lang) for doc in sample]
    tokens: Counter[str] = Counter()
    if sample:
        lengths = np.diff(encoder.encode_flat([doc.text for doc in sample])[1]) + int(config.append_eod)
        for name, n in zip(names, lengths.tolist()):
            tokens[name] += n
    docs = Counter(names)
    scale = scale_to_file(shard, sample, complete)
    return (Counter({k: round(v * scale) for k, v in tokens.items()}),
            Counter({k: round(v * scale) for k, v in docs.items()}))


def estimate_outputs(config: BuildConfig, shards: list[Shard], encoder: TextEncoder, dtype: np.dtype, names: set[str],
                     out_dir: str) -> list[PlannedFile]:
    """Every file the build would write in ``out_dir``, with estimated sizes (see the module docstring)."""
    files = list({s.path: s for s in shards}.values())
    sampled, rest = files[:SAMPLE_FILES], files[SAMPLE_FILES:]
    tokens: Counter[str] = Counter()
    docs: Counter[str] = Counter()
    for shard in sampled:
        t, d = _sample(config, shard, encoder)
        tokens.update(t)
        docs.update(d)
    if rest:
        scale = 1 + sum(map(input_bytes, (s.path for s in rest))) / max(1, sum(input_bytes(s.path) for s in sampled))
        tokens = Counter({k: round(v * scale) for k, v in tokens.items()})
        docs = Counter({k: round(v * scale) for k, v in docs.items()})
    out: list[PlannedFile] = []
    for name in sorted(names | set(tokens)):
        prefix = os.path.join(out_dir, name)
        out.append(PlannedFile(path=data_file_path(prefix), bytes=tokens[name] * dtype.itemsize, lang=name))
        out.append(PlannedFile(path=index_file_path(prefix), bytes=idx_bytes(docs[name]), lang=name))
    return [*out, PlannedFile(path=os.path.join(out_dir, SUMMARY_FILE)),
            PlannedFile(path=os.path.join(out_dir, REJECTS_FILE))]
