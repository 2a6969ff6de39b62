"""The mixture search tests' stub trainer: a proxy's bits per byte from a known law of its weights,
``bpb = BASE - SLOPE x log(w + 0.01)`` plus a small seed effect, written as the real proxy's result file.

Light on purpose (json and bloomdata.durable only): the Slurm test's fake ``python`` runs it once per array task.
A proxy directory is named after its job's key, so the result is marked with the directory's name.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from bloomdata import durable

BASE = {"fr": 3.0, "sw": 3.4, "zh": 4.2, "yo": 3.8}  # others: 3.5
SLOPE = 0.15
SEED_EFFECT = 0.002  # bits per byte per seed step (seed % 3)


def write_datasets(root: Path, docs: dict[str, int]) -> dict[str, Path]:
    """A tokenizer and one Megatron dataset per language of tests/data/corpus (its first ``docs[lang]`` documents,
    EOD after each): ``{"tokenizer": dir, "data": dir}``."""
    import numpy as np  # noqa: PLC0415 - the fake node python above needs none of this

    from bloomdata.megatron.indexed import IndexedDatasetWriter  # noqa: PLC0415
    from bloomdata.tokenizer.bpe import eod_id, save_tokenizer, train_from_texts  # noqa: PLC0415
    from tests.data import CORPUS_DIR  # noqa: PLC0415

    texts = {}
    for lang, n in docs.items():
        with (CORPUS_DIR / f"{lang}.jsonl").open(encoding="utf-8") as f:
            texts[lang] = [json.loads(line)["text"] for _, line in zip(range(n), f)]
    tok = train_from_texts([t for ts in texts.values() for t in ts], vocab_size=400, min_frequency=2)
    tok_dir = save_tokenizer(tok, root / "tokenizer")
    (root / "data").mkdir(parents=True)
    for lang, ts in texts.items():
        with IndexedDatasetWriter(root / "data" / lang, dtype=np.uint16) as w:
            for text in ts:
                w.add_document(tok.encode(text, add_special_tokens=False).ids + [eod_id(tok)])
    return {"tokenizer": tok_dir, "data": root / "data"}


def stub_proxy(path: str) -> None:
    """Write ``path/result.json`` for ``path/job.json`` as the stub's law gives it."""
    job = json.loads((Path(path) / "job.json").read_text(encoding="utf-8"))
    bpb = {n: BASE.get(n, 3.5) - SLOPE * math.log(w + 0.01) + SEED_EFFECT * (job["seed"] % 3)
           for n, w in job["weights"].items()}
    durable.write_marker(Path(path) / "result.json", Path(path).name,
                         {"weights": job["weights"], "seed": job["seed"], "tokens": job["tokens"], "bpb": bpb,
                          "seconds": 0.0})


if __name__ == "__main__":  # python mixture_stub.py -m bloomtrain.mixture_search.proxy DIR (a fake node python)
    stub_proxy(sys.argv[-1])
