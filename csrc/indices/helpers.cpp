// bloomdata._index_helpers: exact, faster builders for the GPT sample indices and the blend index.
//
// Every function reproduces a megatron algorithm bit for bit (docs/megatron-data.md, "Sample index" and
// "Blend"; the numpy twins live in bloomdata/megatron/index_builders.py and the tests compare both with
// megatron-core):
//   - RandomState: numpy's legacy RandomState (MT19937 seeded by init_genrand, masked-rejection
//     random_interval, Fisher-Yates from the end) so a shuffle here permutes exactly like
//     numpy.random.RandomState(seed).shuffle, and successive shuffles continue one stream.
//   - build_document_index: np.tile + shuffle. The lengths in shuffled order are gathered from sizes
//     when sizes fits in cache; otherwise (document, length) pairs packed in 8 bytes are shuffled (the
//     same swaps as shuffling the ids alone), so no pass gathers sizes[doc] from DRAM at random.
//   - build_sample_index: closed form "row k = (document containing token k*L, offset)", run in
//     parallel over chunks of the document index (two passes: chunk token sums, then a merge walk).
//   - build_blending_indices: megatron's greedy largest-deficit rule in float64; compiled with
//     -ffp-contract=off so w*k - c is never fused into an FMA (near-ties must resolve identically).
//     AVX2 paths compute four errors per instruction and take the first lane equal to the max; long
//     blends run as two verified halves on two threads (build_blend).
// Speed (docs/megatron-data.md, "Index build speed"): the shuffle draws its random indices a block ahead
// with a branch-free rejection loop, prefetches the swap targets (hiding most of the DRAM latency of the
// random swaps), keeps the shuffled buffers on transparent huge pages (no page walk per swap), and from 64K
// elements draws on a helper thread while the calling thread swaps. Large streaming passes are split over std::threads
// (OMP_NUM_THREADS caps them, as it does megatron's OpenMP). All heavy loops run without the GIL.
//
// Files: mt19937.h (the stream and its rejection draws), shuffle.h (the two-thread shuffle), sample_index.h
// (the walk), blend.h (the blend kernels and their two-thread split), threads.h (thread counts, parallel-for,
// huge-page buffers); this file holds the pybind11 entry points and the document and shuffle index builders.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "blend.h"
#include "mt19937.h"
#include "sample_index.h"
#include "shuffle.h"
#include "threads.h"

namespace py = pybind11;

namespace {

using namespace bloomindices;

// A numpy array of `rows` x `cols` (cols == 0: 1-D) for an output. An array that will be shuffled in place
// (random_access) owns a huge-page buffer from 1 MiB on: the random swaps would otherwise miss the TLB. The
// others, written once in order, come from numpy's allocator: on huge pages their first-touch faults cost
// 0.11-0.33 ms per MB when the kernel has free huge pages at hand but ~1.2 ms per MB on memory this VM guest
// never used (4 KiB pages: ~0.3 either way), which made a process's first 10M-entry build ~30% slower.
template <typename T>
py::array_t<T> output_array(int64_t rows, int64_t cols, T** data, bool random_access) {
  const int64_t count = rows * std::max<int64_t>(cols, 1);
  std::vector<py::ssize_t> shape{rows}, strides{py::ssize_t(sizeof(T)) * std::max<int64_t>(cols, 1)};
  if (cols > 0) {
    shape.push_back(cols);
    strides.push_back(sizeof(T));
  }
  if (!random_access || count * int64_t(sizeof(T)) < (int64_t(1) << 20)) {
    py::array_t<T> out(shape);
    *data = out.mutable_data();
    return out;
  }
  T* p = alloc_random_access<T>(count);
  *data = p;
  py::capsule owner(p, [](void* q) { std::free(q); });
  return py::array_t<T>(shape, strides, p, owner);
}

// ---------------------------------------------------------------------------------------------
class RandomState {
 public:
  explicit RandomState(uint32_t seed) : rng_(seed) {}
  MT19937& rng() { return rng_; }

  template <typename T>
  void shuffle(py::array_t<T, py::array::c_style> x) {
    if (x.ndim() != 1) throw std::invalid_argument("shuffle expects a 1-D contiguous array");
    T* data = x.mutable_data();
    const int64_t n = x.shape(0);
    py::gil_scoped_release release;
    shuffle_inplace(data, n, rng_);
  }

 private:
  MT19937 rng_;
};

// documents: int32 sequence ids of the split; sizes: int32 lengths of every sequence in the dataset.
// Returns (document_index int32[E*D], lengths int32[E*D]) where lengths[k] = sizes[document_index[k]].
// With separate_final_epoch, the first E-1 epochs are shuffled together and the last one after
// them, which is the order megatron draws its random numbers in.
py::tuple build_document_index(py::array_t<int32_t, py::array::c_style> documents,
                               py::array_t<int32_t, py::array::c_style> sizes, int64_t num_epochs,
                               bool separate_final_epoch, RandomState& state) {
  const int64_t d = documents.shape(0);
  const int64_t total = d * num_epochs;
  const int32_t* docs = documents.data();
  const int32_t* sz = sizes.data();
  const int64_t num_sizes = sizes.shape(0);
  // Two layouts, same swaps. When `sizes` fits in cache, shuffle the 4-byte ids alone (half the
  // bytes moved by the random swaps) and gather the lengths afterwards; otherwise that gather would be
  // one DRAM miss per entry, so shuffle (id, length) pairs packed in 8 bytes and just unpack them.
  const bool gather = num_sizes * int64_t(sizeof(int32_t)) <= kGatherMaxBytes;
  int32_t *out_doc = nullptr, *out_len = nullptr;
  py::array_t<int32_t> doc_out = output_array<int32_t>(total, 0, &out_doc, gather);  // shuffled in place
  py::array_t<int32_t> len_out = output_array<int32_t>(total, 0, &out_len, false);
  {
    py::gil_scoped_release release;
    for (int64_t k = 0; k < d; ++k) {
      if (docs[k] < 0 || docs[k] >= num_sizes) throw std::out_of_range("document id outside sizes");
    }
    auto shuffle_epochs = [&](auto* x) {
      if (separate_final_epoch && num_epochs > 1) {
        shuffle_inplace(x, d * (num_epochs - 1), state.rng());
        shuffle_inplace(x + d * (num_epochs - 1), d, state.rng());
      } else {
        shuffle_inplace(x, total, state.rng());
      }
    };
    if (gather) {
      parallel_chunks(total, kParallelGrain, [=](int, int64_t b, int64_t e) {
        for (int64_t k = b, j = (d ? b % d : 0); k < e; ++k) {
          out_doc[k] = docs[j];
          if (++j == d) j = 0;
        }
      });
      shuffle_epochs(out_doc);
      parallel_chunks(total, kParallelGrain, [=](int, int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) out_len[k] = sz[out_doc[k]];
      });
    } else {
      // Packed (doc, len) pairs: low 32 bits the document id, high 32 bits its length.
      std::unique_ptr<uint64_t, void (*)(void*)> pairs(alloc_random_access<uint64_t>(total), std::free);
      uint64_t* pp = pairs.get();
      parallel_chunks(total, kParallelGrain, [=](int, int64_t b, int64_t e) {
        for (int64_t k = b, j = (d ? b % d : 0); k < e; ++k) {
          const int32_t doc = docs[j];
          pp[k] = uint64_t(uint32_t(doc)) | (uint64_t(uint32_t(sz[doc])) << 32);
          if (++j == d) j = 0;
        }
      });
      shuffle_epochs(pp);
      parallel_chunks(total, kParallelGrain, [=](int, int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k) {
          out_doc[k] = int32_t(uint32_t(pp[k]));
          out_len[k] = int32_t(uint32_t(pp[k] >> 32));
        }
      });
    }
  }
  return py::make_tuple(doc_out, len_out);
}

// lengths: int32 length of each document-index entry (sample_index.h has the layout).
template <typename T>
py::array_t<T> build_sample_index(py::array_t<int32_t, py::array::c_style> lengths, int64_t seq_length,
                                  int64_t num_samples) {
  if (seq_length <= 0 || num_samples < 0) throw std::invalid_argument("bad seq_length or num_samples");
  T* row = nullptr;
  py::array_t<T> out = output_array<T>(num_samples + 1, 2, &row, false);
  const int32_t* len = lengths.data();
  const int64_t m = lengths.shape(0);
  py::gil_scoped_release release;
  sample_index_rows(len, m, seq_length, num_samples, row);
  return out;
}

template <typename T>
py::array_t<T> build_shuffle_index(int64_t first, int64_t total, RandomState& state) {
  T* x = nullptr;
  py::array_t<T> out = output_array<T>(total, 0, &x, true);
  {
    py::gil_scoped_release release;
    parallel_chunks(total, kParallelGrain, [=](int, int64_t b, int64_t e) {  // first touch on both cores
      for (int64_t k = b; k < e; ++k) x[k] = T(k);
    });
    shuffle_inplace(x, first, state.rng());
    if (first < total) shuffle_inplace(x + first, total - first, state.rng());
  }
  return out;
}

template <typename I>
py::tuple build_blending_indices(py::array_t<double, py::array::c_style> weights, int64_t size, bool simd) {
  const int64_t k_count = weights.shape(0);
  if (k_count <= 0) throw std::invalid_argument("no datasets to blend");
  if (k_count - 1 > int64_t(std::numeric_limits<I>::max()))
    throw std::invalid_argument("too many datasets for the blend index dtype");
  I* di = nullptr;
  int64_t* dsi = nullptr;
  py::array_t<I> dataset_index = output_array<I>(size, 0, &di, false);
  py::array_t<int64_t> dataset_sample_index = output_array<int64_t>(size, 0, &dsi, false);
  std::vector<double> w(weights.data(), weights.data() + k_count);
  {
    py::gil_scoped_release release;
    build_blend(w, size, di, dsi, simd);
  }
  return py::make_tuple(dataset_index, dataset_sample_index);
}

// Samples each dataset gives to a blend (np.bincount of dataset_index), for the oversampling check on every
// load: per-thread histograms over chunks, summed. Four interleaved tables per thread, so runs of one dataset do
// not serialise on a single counter's store-to-load forwarding.
template <typename I>
py::array_t<int64_t> count_datasets(py::array_t<I, py::array::c_style> index, int64_t k_count) {
  if (k_count <= 0 || k_count > 65536) throw std::invalid_argument("k_count must be in [1, 65536]");
  const I* x = index.data();
  const int64_t n = index.size();
  const int64_t nt = chunk_threads(n, kParallelGrain);  // parallel_chunks' split: one table set per thread
  std::vector<int64_t> tables(size_t(nt) * 4 * size_t(k_count), 0);
  int64_t bad = -1;
  {
    py::gil_scoped_release release;
    std::atomic<int64_t> first_bad{-1};
    parallel_chunks(n, kParallelGrain, [&](int t, int64_t b, int64_t e) {
      int64_t* h = tables.data() + size_t(t) * 4 * size_t(k_count);
      int64_t k = b;
      for (; k + 4 <= e; k += 4) {
        const int64_t v0 = x[k], v1 = x[k + 1], v2 = x[k + 2], v3 = x[k + 3];
        if (uint64_t(v0) >= uint64_t(k_count) || uint64_t(v1) >= uint64_t(k_count) ||
            uint64_t(v2) >= uint64_t(k_count) || uint64_t(v3) >= uint64_t(k_count))
          break;
        ++h[v0];
        ++h[k_count + v1];
        ++h[2 * k_count + v2];
        ++h[3 * k_count + v3];
      }
      for (; k < e; ++k) {
        if (uint64_t(int64_t(x[k])) >= uint64_t(k_count)) {
          int64_t expected = -1;
          first_bad.compare_exchange_strong(expected, k);
          return;
        }
        ++h[x[k]];
      }
    });
    bad = first_bad.load();
  }
  if (bad >= 0) throw std::out_of_range("dataset index " + std::to_string(int64_t(x[bad])) + " at position " +
                                        std::to_string(bad) + " is outside [0, " + std::to_string(k_count) + ")");
  py::array_t<int64_t> counts(k_count);
  int64_t* out = counts.mutable_data();
  for (int64_t i = 0; i < k_count; ++i) {
    int64_t sum = 0;
    for (int64_t t = 0; t < 4 * nt; ++t) sum += tables[size_t(t) * size_t(k_count) + size_t(i)];
    out[i] = sum;
  }
  return counts;
}

}  // namespace

PYBIND11_MODULE(_index_helpers, m) {
  m.doc() = "bloomdata C++ index builders (exact twins of the numpy builders in bloomdata.index_builders)";
  m.attr("ABI_VERSION") = 1;

  py::class_<RandomState>(m, "RandomState", "numpy.random.RandomState(seed)'s MT19937 stream and shuffle")
      .def(py::init<uint32_t>(), py::arg("seed"))
      .def("shuffle_int32", &RandomState::shuffle<int32_t>, py::arg("x"))
      .def("shuffle_uint32", &RandomState::shuffle<uint32_t>, py::arg("x"))
      .def("shuffle_int64", &RandomState::shuffle<int64_t>, py::arg("x"))
      .def("shuffle_uint64", &RandomState::shuffle<uint64_t>, py::arg("x"));

  m.def(
      "set_thresholds",
      [](int64_t pipeline_from, int64_t parallel_grain, int64_t gather_max_bytes) {
        py::tuple old = py::make_tuple(kPipelineFrom, kParallelGrain, kGatherMaxBytes);
        kPipelineFrom = std::max<int64_t>(2, pipeline_from);
        kParallelGrain = std::max<int64_t>(1, parallel_grain);
        kGatherMaxBytes = gather_max_bytes;
        return old;
      },
      py::arg("pipeline_from"), py::arg("parallel_grain"), py::arg("gather_max_bytes"),
      "(tests) sizes from which shuffles are pipelined, passes threaded and lengths gathered; returns the old values");
  m.def(
      "set_blend_split",
      [](int64_t split_from, int64_t warmup) {
        py::tuple old = py::make_tuple(kBlendSplitFrom, kBlendWarmup);
        kBlendSplitFrom = std::max<int64_t>(2, split_from);
        kBlendWarmup = std::max<int64_t>(0, warmup);
        return old;
      },
      py::arg("split_from"), py::arg("warmup"),
      "(tests) blend length from which the blend runs as two verified halves, and the warm-up; returns the old values");
  m.def("blend_split_stats", [] { return py::make_tuple(blend_splits.load(), blend_reruns.load()); },
        "(tests) (blends built as two halves, of which second halves re-run from the exact counts)");
  m.def("build_document_index", &build_document_index, py::arg("documents"), py::arg("sizes"),
        py::arg("num_epochs"), py::arg("separate_final_epoch"), py::arg("state"));
  m.def("build_sample_index_int32", &build_sample_index<int32_t>, py::arg("lengths"), py::arg("seq_length"),
        py::arg("num_samples"));
  m.def("build_sample_index_int64", &build_sample_index<int64_t>, py::arg("lengths"), py::arg("seq_length"),
        py::arg("num_samples"));
  m.def("build_shuffle_index_uint32", &build_shuffle_index<uint32_t>, py::arg("first"), py::arg("total"),
        py::arg("state"));
  m.def("build_shuffle_index_int64", &build_shuffle_index<int64_t>, py::arg("first"), py::arg("total"),
        py::arg("state"));
  m.def("build_blending_indices_int16", &build_blending_indices<int16_t>, py::arg("weights"), py::arg("size"),
        py::arg("simd") = true);
  m.def("build_blending_indices_uint8", &build_blending_indices<uint8_t>, py::arg("weights"), py::arg("size"),
        py::arg("simd") = true);
  m.def("count_datasets_int16", &count_datasets<int16_t>, py::arg("dataset_index"), py::arg("k_count"));
  m.def("count_datasets_uint8", &count_datasets<uint8_t>, py::arg("dataset_index"), py::arg("k_count"));
}
