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

BASE = {"fr": 3.0, "sw": 3.4, "zh": 4.2, "yo": 3.8}
SLOPE = 0.15
SEED_EFFECT = 0.002  # bits per byte per seed step (seed % 3)


def stub_proxy(path: str) -> None:
    """Write ``path/result.json`` for ``path/job.json`` as the stub's law gives it."""
    job = json.loads((Path(path) / "job.json").read_text(encoding="utf-8"))
    bpb = {n: BASE[n] - SLOPE * math.log(w + 0.01) + SEED_EFFECT * (job["seed"] % 3) for n, w in job["weights"].items()}
    durable.write_marker(Path(path) / "result.json", Path(path).name,
                         {"weights": job["weights"], "seed": job["seed"], "tokens": job["tokens"], "bpb": bpb,
                          "seconds": 0.0})


if __name__ == "__main__":  # python mixture_stub.py -m bloomtrain.mixture_search.proxy DIR (a fake node python)
    stub_proxy(sys.argv[-1])
