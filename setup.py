"""Builds the C++ sample-index helpers (csrc/indices) as ``bloomdata._index_helpers`` and the BPE merge learner
(csrc/bpe) as ``bloomdata._bpe_learner`` and the BPE encoder (csrc/bpe/encoder.h) as ``bloomdata._bpe_encoder``.

Everything else about the package lives in pyproject.toml. The extension is optional in the
Megatron way: if it cannot be built, the install still succeeds and bloomdata falls back to its
numpy builders, which produce identical arrays (tests/bloomdata/test_index_builders.py), and the merge
learner falls back to its Python reference, which learns the same merges (tests/bloomdata/test_tokenizer_counts.py),
and the encoder to HF tokenizers' own, which gives the same ids (tests/bloomdata/test_encoder.py).
The fused training kernels (csrc/kernels) are not built here: bloomtrain.kernels JIT-builds them
with torch.utils.cpp_extension on first use, or ahead of time with `bloomtrain build-kernels`.
"""

from glob import glob

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup

# Python's own CFLAGS carry -g: debug info took 30% of the compile (helpers.cpp 30.8 -> 21.8 s, bindings.cpp
# 17.3 -> 13.5 s on a 2-vCPU EPYC); the last -g flag wins.
NO_DEBUG_INFO = ["-g0"]

ext_modules = [
    Pybind11Extension(
        "bloomdata._index_helpers",
        ["csrc/indices/helpers.cpp"],
        depends=sorted(glob("csrc/indices/*.h")),  # one translation unit; rebuild when a header changes
        cxx_std=17,
        # -ffp-contract=off: the blend recurrence must not be contracted into FMAs, or near-ties could
        # flip against megatron-core's build (docs/megatron-data.md, "Floating point").
        extra_compile_args=["-O3", "-ffp-contract=off", "-fopenmp", *NO_DEBUG_INFO],
        extra_link_args=["-fopenmp"],
        optional=True,
    ),
    Pybind11Extension(
        "bloomdata._bpe_learner",
        ["csrc/bpe/bindings.cpp"],
        depends=sorted(glob("csrc/bpe/*.h")),
        cxx_std=17,
        extra_compile_args=["-O3", *NO_DEBUG_INFO],
        optional=True,
    ),
    Pybind11Extension(
        "bloomdata._bpe_encoder",
        ["csrc/bpe/encoder_bindings.cpp"],
        depends=sorted(glob("csrc/bpe/*.h")),
        cxx_std=17,
        extra_compile_args=["-O3", *NO_DEBUG_INFO],
        optional=True,
    ),
]

# The two extensions compile side by side (make install and the wheelhouse test wait for the longer one only).
setup(ext_modules=ext_modules, options={"build_ext": {"parallel": len(ext_modules)}})
