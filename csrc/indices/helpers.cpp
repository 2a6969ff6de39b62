// bloomdata._index_helpers: exact, faster builders for the GPT sample indices and the blend index.
//
// Every function reproduces a reference algorithm bit for bit (reference: shared/reference/
// megatron-data.md sections 2 and 3; the numpy twins live in bloomdata/index_builders.py and the
// tests compare both with megatron-core):
//   - RandomState: numpy's legacy RandomState (MT19937 seeded by init_genrand, masked-rejection
//     random_interval, Fisher-Yates from the end) so a shuffle here permutes exactly like
//     numpy.random.RandomState(seed).shuffle, and successive shuffles continue one stream.
//   - build_document_index: np.tile + shuffle of (document, length) pairs packed in 8 bytes. The
//     swaps are the same as shuffling the document ids alone, and the shuffled lengths come for
//     free, so the sample-index pass streams instead of gathering sizes[doc] at random.
//   - build_sample_index: closed form "row k = (document containing token k*L, offset)", run in
//     parallel over chunks of the document index (two passes: chunk token sums, then a merge walk).
//   - build_blending_indices: megatron's greedy largest-deficit rule in float64; compiled with
//     -ffp-contract=off so w*k - c is never fused into an FMA (near-ties must resolve identically).
// Speed: the shuffle draws its random indices a block ahead and prefetches the swap targets, which
// hides most of the DRAM latency of the random swaps. All heavy loops run without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------------------------------------
// MT19937 exactly as numpy's legacy RandomState uses it (numpy/random/src/mt19937).
class MT19937 {
 public:
  explicit MT19937(uint32_t seed) { init_genrand(seed); }

  void init_genrand(uint32_t seed) {
    mt_[0] = seed;
    for (int i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + uint32_t(i);
    pos_ = kN;
  }

  inline uint32_t next32() {
    if (pos_ == kN) generate();
    uint32_t y = mt_[pos_++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= (y >> 18);
    return y;
  }

  inline uint64_t next64() {
    // numpy: (uint64_t)next32 << 32 | next32, high word drawn first.
    uint64_t hi = next32();
    return (hi << 32) | next32();
  }

  // numpy random_interval(max): uniform in [0, max] by masked rejection.
  inline uint64_t interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t value;
    if (max <= 0xffffffffull) {
      while ((value = (next32() & mask)) > max) {
      }
    } else {
      while ((value = (next64() & mask)) > max) {
      }
    }
    return value;
  }

 private:
  static constexpr int kN = 624;
  static constexpr int kM = 397;
  void generate() {
    constexpr uint32_t upper = 0x80000000u, lower = 0x7fffffffu, matrix = 0x9908b0dfu;
    int k = 0;
    for (; k < kN - kM; ++k) {
      uint32_t y = (mt_[k] & upper) | (mt_[k + 1] & lower);
      mt_[k] = mt_[k + kM] ^ (y >> 1) ^ (-(y & 1u) & matrix);
    }
    for (; k < kN - 1; ++k) {
      uint32_t y = (mt_[k] & upper) | (mt_[k + 1] & lower);
      mt_[k] = mt_[k + (kM - kN)] ^ (y >> 1) ^ (-(y & 1u) & matrix);
    }
    uint32_t y = (mt_[kN - 1] & upper) | (mt_[0] & lower);
    mt_[kN - 1] = mt_[kM - 1] ^ (y >> 1) ^ (-(y & 1u) & matrix);
    pos_ = 0;
  }
  uint32_t mt_[kN];
  int pos_;
};

// Fisher-Yates from the end, identical swaps to numpy RandomState.shuffle on a 1-D array.
// The j's of a block are drawn first (a tight RNG loop), then the swaps run with x[j] prefetched
// kAhead swaps early: the swap loop is bound by memory latency, the draw loop by arithmetic.
template <typename T>
void shuffle_inplace(T* x, int64_t n, MT19937& rng) {
  constexpr int64_t kBlock = 8192;
  constexpr int64_t kAhead = 48;
  std::vector<int64_t> js(static_cast<size_t>(std::min<int64_t>(kBlock, std::max<int64_t>(n, 1))));
  int64_t i = n - 1;
  while (i >= 1) {
    const int64_t count = std::min<int64_t>(kBlock, i);  // positions i, i-1, ..., i-count+1
    for (int64_t t = 0; t < count; ++t) js[t] = static_cast<int64_t>(rng.interval(uint64_t(i - t)));
    for (int64_t t = 0; t < count; ++t) {
      if (t + kAhead < count) __builtin_prefetch(x + js[t + kAhead], 1, 0);
      const int64_t a = i - t, b = js[t];
      T tmp = x[a];
      x[a] = x[b];
      x[b] = tmp;
    }
    i -= count;
  }
}

int num_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
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
  py::array_t<int32_t> doc_out(total), len_out(total);
  const int32_t* docs = documents.data();
  const int32_t* sz = sizes.data();
  const int64_t num_sizes = sizes.shape(0);
  int32_t* out_doc = doc_out.mutable_data();
  int32_t* out_len = len_out.mutable_data();
  {
    py::gil_scoped_release release;
    for (int64_t k = 0; k < d; ++k) {
      if (docs[k] < 0 || docs[k] >= num_sizes) throw std::out_of_range("document id outside sizes");
    }
    // Packed (doc, len) pairs: low 32 bits the document id, high 32 bits its length.
    std::vector<uint64_t> pairs(static_cast<size_t>(total));
    const int nt = num_threads();
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t k = 0; k < total; ++k) {
      const int32_t doc = docs[k % d];
      pairs[k] = uint64_t(uint32_t(doc)) | (uint64_t(uint32_t(sz[doc])) << 32);
    }
    if (separate_final_epoch && num_epochs > 1) {
      shuffle_inplace(pairs.data(), d * (num_epochs - 1), state.rng());
      shuffle_inplace(pairs.data() + d * (num_epochs - 1), d, state.rng());
    } else {
      shuffle_inplace(pairs.data(), total, state.rng());
    }
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t k = 0; k < total; ++k) {
      out_doc[k] = int32_t(uint32_t(pairs[k]));
      out_len[k] = int32_t(uint32_t(pairs[k] >> 32));
    }
  }
  return py::make_tuple(doc_out, len_out);
}

// lengths: int32 length of each document-index entry. Row k (k = 1..num_samples) is the entry
// holding global token k*seq_length and the offset of that token in it; row 0 is (0, 0).
template <typename T>
py::array_t<T> build_sample_index(py::array_t<int32_t, py::array::c_style> lengths, int64_t seq_length,
                                  int64_t num_samples) {
  if (seq_length <= 0 || num_samples < 0) throw std::invalid_argument("bad seq_length or num_samples");
  const int64_t m = lengths.shape(0);
  py::array_t<T> out({num_samples + 1, int64_t(2)});
  T* row = out.mutable_data();
  const int32_t* len = lengths.data();
  {
    py::gil_scoped_release release;
    row[0] = 0;
    row[1] = 0;
    const int nt = std::max(1, std::min<int>(num_threads(), int(m / 65536) + 1));
    std::vector<int64_t> chunk_tokens(nt + 1, 0);
#pragma omp parallel num_threads(nt)
    {
#ifdef _OPENMP
      const int c = omp_get_thread_num();
      const int p = omp_get_num_threads();  // may be fewer than asked for
#else
      const int c = 0;
      const int p = 1;
#endif
      auto chunk_begin = [&](int i) { return m * i / p; };
      int64_t sum = 0;
      for (int64_t e = chunk_begin(c); e < chunk_begin(c + 1); ++e) sum += len[e];
      chunk_tokens[c + 1] = sum;
#pragma omp barrier
#pragma omp single
      for (int i = 1; i <= p; ++i) chunk_tokens[i] += chunk_tokens[i - 1];
      // Sample boundaries whose token falls inside this chunk: k*L in [start, chunk end).
      int64_t start = chunk_tokens[c];
      int64_t k = std::max<int64_t>(1, (start + seq_length - 1) / seq_length);
      int64_t pos = k * seq_length;
      for (int64_t e = chunk_begin(c); e < chunk_begin(c + 1) && k <= num_samples; ++e) {
        const int64_t end = start + len[e];
        while (pos < end && k <= num_samples) {
          row[2 * k] = T(e);
          row[2 * k + 1] = T(pos - start);
          ++k;
          pos += seq_length;
        }
        start = end;
      }
    }
  }
  return out;
}

template <typename T>
py::array_t<T> build_shuffle_index(int64_t first, int64_t total, RandomState& state) {
  py::array_t<T> out(total);
  T* x = out.mutable_data();
  {
    py::gil_scoped_release release;
    for (int64_t k = 0; k < total; ++k) x[k] = T(k);
    shuffle_inplace(x, first, state.rng());
    if (first < total) shuffle_inplace(x + first, total - first, state.rng());
  }
  return out;
}

// Greedy blend: sample k goes to argmax_i (w_i * max(k, 1) - c_i), ties to the lowest i.
// The counts are kept as doubles (exact below 2^53), so each error is the same two IEEE
// operations megatron performs; the strict '>' scan keeps its tie-breaking.
template <typename I>
py::tuple build_blending_indices(py::array_t<double, py::array::c_style> weights, int64_t size) {
  const int64_t k_count = weights.shape(0);
  if (k_count <= 0) throw std::invalid_argument("no datasets to blend");
  if (k_count - 1 > int64_t(std::numeric_limits<I>::max()))
    throw std::invalid_argument("too many datasets for the blend index dtype");
  py::array_t<I> dataset_index(size);
  py::array_t<int64_t> dataset_sample_index(size);
  I* di = dataset_index.mutable_data();
  int64_t* dsi = dataset_sample_index.mutable_data();
  std::vector<double> w(weights.data(), weights.data() + k_count);
  {
    py::gil_scoped_release release;
    std::vector<double> c(static_cast<size_t>(k_count), 0.0);
    const double* wp = w.data();
    double* cp = c.data();
    for (int64_t s = 0; s < size; ++s) {
      const double kd = std::max(static_cast<double>(s), 1.0);
      int64_t best = 0;
      double best_err = wp[0] * kd - cp[0];
      for (int64_t i = 1; i < k_count; ++i) {
        const double err = wp[i] * kd - cp[i];
        best = err > best_err ? i : best;
        best_err = err > best_err ? err : best_err;
      }
      di[s] = static_cast<I>(best);
      dsi[s] = static_cast<int64_t>(cp[best]);
      cp[best] += 1.0;
    }
  }
  return py::make_tuple(dataset_index, dataset_sample_index);
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
  m.def("build_blending_indices_int16", &build_blending_indices<int16_t>, py::arg("weights"), py::arg("size"));
  m.def("build_blending_indices_uint8", &build_blending_indices<uint8_t>, py::arg("weights"), py::arg("size"));
}
