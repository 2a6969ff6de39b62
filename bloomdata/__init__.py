"""bloomdata: BLOOM tokenizer, Megatron-compatible token datasets, sample indices and blends.

Never imports torch (data workers stay light); only ``bloomdata.jobs.executor`` imports dask.
The public API is re-exported here; heavier pieces are imported on first use.
"""

from bloomdata.errors import BloomstackError
from bloomdata.megatron.indexed import (
    IndexedDataset,
    IndexedDatasetWriter,
    best_fitting_dtype,
    merge_datasets,
)

# name -> module, imported on first attribute access (PEP 562) so `import bloomdata` stays cheap.
_LAZY = {
    "GPTSamples": "bloomdata.megatron.gpt_samples",
    "SampleSettings": "bloomdata.megatron.gpt_samples",
    "Blend": "bloomdata.megatron.blend",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bloomdata' has no attribute {name!r}")


__all__ = [
    "BloomstackError",
    "Blend",
    "GPTSamples",
    "SampleSettings",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "best_fitting_dtype",
    "merge_datasets",
]
