// bloomdata._index_helpers: exact, faster builders for the GPT sample indices and the blend index.
//
// Every function reproduces a reference algorithm bit for bit (reference: shared/reference/
// megatron-data.md sections 2 and 3; the numpy twins live in bloomdata/index_builders.py and the
// tests compare both with megatron-core):
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
// Speed (reference section 6.4): the shuffle draws its random indices a block ahead with a branch-free
// rejection loop, prefetches the swap targets (hiding most of the DRAM latency of the random swaps), keeps
// the shuffled buffers on transparent huge pages (no page walk per swap), and from 64K elements draws on a
// helper thread while the calling thread swaps. Large streaming passes are split over std::threads
// (OMP_NUM_THREADS caps them, as it does megatron's OpenMP). All heavy loops run without the GIL.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <immintrin.h>
#include <sys/mman.h>

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

namespace py = pybind11;

namespace {

// ---------------------------------------------------------------------------------------------
// One block of 624 words: the state update and the tempering, vectorised. Built twice (AVX2 and baseline
// x86-64, picked at load time by CPU): 8 lanes instead of 4 take generation from 0.78 to 0.33 ns per word,
// and the drawer thread of a shuffle spends about a third of its time here.
constexpr int kMTN = 624, kMTM = 397;
__attribute__((target_clones("avx2", "default"))) void mt19937_generate(uint32_t* mt_, uint32_t* out_) {
  constexpr int kN = kMTN, kM = kMTM;
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
  // Temper the whole block at once (vectorised) instead of one word per draw.
  for (int i = 0; i < kN; ++i) {
    uint32_t t = mt_[i];
    t ^= (t >> 11);
    t ^= (t << 7) & 0x9d2c5680u;
    t ^= (t << 15) & 0xefc60000u;
    t ^= (t >> 18);
    out_[i] = t;
  }
}

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
    return out_[pos_++];
  }

  // The tempered words not drawn yet (at least one: refills the block when it is used up); consume(n) draws
  // the first n of them. Lets a caller loop over plain memory instead of calling next32 per word.
  inline const uint32_t* words(int64_t* available) {
    if (pos_ == kN) generate();
    *available = kN - pos_;
    return out_ + pos_;
  }
  inline void consume(int64_t n) { pos_ += int(n); }

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
  static constexpr int kN = kMTN;
  void generate() {
    mt19937_generate(mt_, out_);
    pos_ = 0;
  }
  uint32_t mt_[kN];
  uint32_t out_[kN];
  int pos_;
};

// Draw the j's of positions hi, hi-1, ..., hi-count+1 into js: numpy's masked rejection
// (random_interval) written without a data-dependent branch (a rejected draw is overwritten by the
// next one), since about 28% of the draws are rejected at random and a mispredicted branch costs more
// than the draw itself. The mask is constant while the position stays in one power-of-two range, so it is
// computed once per range, and "v <= hi - t" is tested as "v + t <= hi": the loop-carried chain through
// t is then an add, a compare and an add (the draws themselves do not depend on t).
// J: uint32_t while hi < 2^32 (half the bytes the drawer hands to the swapping thread), else int64_t.
template <typename J>
inline void draw_block(MT19937& rng, int64_t hi, int64_t count, J* js) {
  int64_t t = 0;
  while (t < count) {
    const uint64_t cur = uint64_t(hi - t);
    if (cur > 0xffffffffull) {  // arrays of more than 2^32 elements: numpy's 64-bit draws
      js[t++] = static_cast<J>(rng.interval(cur));
      continue;
    }
    const uint32_t mask = 0xffffffffu >> __builtin_clz(uint32_t(cur) | 1u);
    // positions keep this mask while cur >= (mask >> 1) + 1, i.e. while t < hi - (mask >> 1)
    const int64_t range_end = std::min<int64_t>(count, hi - int64_t(mask >> 1));
    const uint64_t h = uint64_t(hi);
    while (t < range_end) {
      // Each word moves t by at most one, so q words overrun neither the generator's block nor the range:
      // the inner loop has a single counted exit (7 instructions per word).
      int64_t available;
      const uint32_t* w = rng.words(&available);
      const int64_t q = std::min<int64_t>(available, range_end - t);
      for (int64_t i = 0; i < q; ++i) {
        const uint32_t v = w[i] & mask;
        js[t] = v;
        t += (uint64_t(v) + uint64_t(t) <= h);
      }
      rng.consume(q);
    }
  }
}

// Apply the swaps of one block, with the random target prefetched kAhead swaps early: the swap loop is
// bound by memory latency, so several targets must be in flight at once. The prefetch is a plain read
// prefetch into all cache levels (prefetcht0): a write-intent prefetch with locality 0 compiles to
// prefetchnta wherever the build does not enable PRFCHW (the portable -O3 build), and prefetchnta keeps
// the line out of L2, so the swap found it gone: 4.4 vs 1.6 ns per swap on a 2 MB array, 7.6 vs 4.7 on 32 MB.
template <typename T, typename J>
inline void swap_block(T* x, int64_t hi, int64_t count, const J* js) {
  constexpr int64_t kAhead = 64;
  for (int64_t t = 0; t < count; ++t) {
    if (t + kAhead < count) __builtin_prefetch(x + js[t + kAhead], 0, 3);
    const int64_t a = hi - t, b = int64_t(js[t]);
    T tmp = x[a];
    x[a] = x[b];
    x[b] = tmp;
  }
}

int num_threads();

// Below these sizes a pass runs on the calling thread alone: starting and joining a thread costs tens of
// microseconds, worth it once the pass takes a few hundred microseconds (a blend's components are mostly
// under 2M entries: with 1M per thread their passes all ran on one thread, 36 vs 26 ms of sample index).
// (variables, not constants, so the tests can lower them to exercise the threaded paths on tiny inputs)
int64_t kPipelineFrom = int64_t(1) << 16;  // shuffle: 64K elements
int64_t kParallelGrain = int64_t(1) << 18;  // streaming passes: 256K elements per thread
int64_t kGatherMaxBytes = int64_t(16) << 20;  // document index: gather lengths from sizes up to 16 MB

// Pipelined shuffle: a drawer thread fills a ring of blocks with the j's while this thread applies the swaps of
// earlier blocks (the draws depend only on the RNG, never on the data). Single producer, single consumer:
// `drawn` and `swapped` count whole blocks; a slot is refilled only after its block was swapped.
// Every j crosses from the drawer's core to the swapper's, one cache line per 16 (uint32) j's. That traffic is
// what the pipeline costs: on the 2-vCPU VM this was measured on, the host sometimes places the two vCPUs far
// apart (a cache-line round trip of ~500 ns instead of ~120 ns), and reading lines left dirty in the other
// core's cache then made a 2M-element shuffle take 4.7 ns per element instead of 2.3 (one thread alone: 4).
// Hence uint32 j's and streaming stores from the drawer.
class DrawRing {
 public:
  static constexpr int64_t kSlots = 8;
  static constexpr int64_t kBlock = 16384;  // draws per block: 64 KB of uint32 j's (128 KB as int64)

  // The 1 MB ring belongs to the calling thread and is reused by its next shuffle: a fresh one cost ~0.1 ms of
  // page faults per shuffle, and a blend build runs about a hundred shuffles. (The drawer is joined before the
  // shuffle returns, so no two shuffles share one ring.)
  DrawRing() : buf_(ring_memory()) {}
  int64_t* slot(int64_t b) { return buf_ + (b % kSlots) * kBlock; }

  // Wait (spin briefly, then yield the core) until pred() holds.
  template <typename Pred>
  static void wait(Pred pred) {
    for (int spin = 0; !pred(); ++spin) {
      if (spin < 256) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

  // each counter on its own cache line: the two threads spin on them
  alignas(64) std::atomic<int64_t> drawn{0};
  alignas(64) std::atomic<int64_t> swapped{0};

 private:
  static int64_t* ring_memory() {
    thread_local std::vector<int64_t> memory(static_cast<size_t>(kSlots * kBlock));
    return memory.data();
  }
  int64_t* buf_;
};

// Fisher-Yates from the end, identical swaps to numpy RandomState.shuffle on a 1-D array.
template <typename T, typename J>
void shuffle_with(T* x, int64_t n, MT19937& rng) {
  constexpr int64_t kBlock = DrawRing::kBlock;
  if (n < kPipelineFrom || num_threads() < 2) {
    std::vector<J> js(static_cast<size_t>(std::min<int64_t>(kBlock, n)));
    for (int64_t i = n - 1; i >= 1;) {
      const int64_t count = std::min<int64_t>(kBlock, i);
      draw_block(rng, i, count, js.data());
      swap_block(x, i, count, js.data());
      i -= count;
    }
    return;
  }
  // Block b covers positions n-1-b*kBlock down to 1; both threads derive the same blocks.
  const int64_t blocks = (n - 1 + kBlock - 1) / kBlock;
  DrawRing ring;
  std::thread drawer([&] {
    for (int64_t b = 0; b < blocks; ++b) {
      DrawRing::wait([&] { return b - ring.swapped.load(std::memory_order_acquire) < DrawRing::kSlots; });
      const int64_t i = n - 1 - b * kBlock;
      const int64_t count = std::min<int64_t>(kBlock, i);
      J* dst = reinterpret_cast<J*>(ring.slot(b));
      // Draw into an L1-resident buffer, then copy to the slot with streaming stores: the lines go to memory
      // instead of sitting dirty in this core's cache, and the swapper's prefetcher reads them from there.
      // When the vCPUs were far apart this took a 2M-element shuffle from 4.7 to 2.6 ns per element (one
      // thread alone: 4.0); when they are close it costs ~0.2 ns.
      alignas(64) J local[2048];
      for (int64_t t = 0; t < count; t += 2048) {
        const int64_t c = std::min<int64_t>(2048, count - t);
        draw_block(rng, i - t, c, local);
        constexpr int64_t kPer = 16 / sizeof(J);
        int64_t q = 0;
        for (; q + kPer <= c; q += kPer)
          _mm_stream_si128(reinterpret_cast<__m128i*>(dst + t + q), _mm_load_si128(reinterpret_cast<const __m128i*>(local + q)));
        for (; q < c; ++q) dst[t + q] = local[q];
      }
      _mm_sfence();  // the streamed j's are visible before `drawn` says so
      ring.drawn.store(b + 1, std::memory_order_release);
    }
  });
  for (int64_t b = 0; b < blocks; ++b) {
    DrawRing::wait([&] { return ring.drawn.load(std::memory_order_acquire) > b; });
    const int64_t i = n - 1 - b * kBlock;
    swap_block(x, i, std::min<int64_t>(kBlock, i), reinterpret_cast<const J*>(ring.slot(b)));
    ring.swapped.store(b + 1, std::memory_order_release);
  }
  drawer.join();
}

template <typename T>
void shuffle_inplace(T* x, int64_t n, MT19937& rng) {
  if (n < 2) return;
  if (n - 1 <= int64_t(0xffffffffll)) {
    shuffle_with<T, uint32_t>(x, n, rng);
  } else {
    shuffle_with<T, int64_t>(x, n, rng);
  }
}

// Threads for the parallel passes: OMP_NUM_THREADS if set, else the hardware's. Plain std::threads,
// created per call and joined: OpenMP's idle workers spin after a region and, on a small machine, steal
// the core the (sequential) shuffle runs on.
int num_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// fn(t, begin, end) over [0, n) split into contiguous chunks; serial below `grain` elements per thread.
template <typename Fn>
void parallel_chunks(int64_t n, int64_t grain, Fn fn) {
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(num_threads(), n / std::max<int64_t>(grain, 1)));
  if (nt == 1) {
    fn(0, int64_t(0), n);
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < nt; ++t) pool.emplace_back(fn, int(t), n * t / nt, n * (t + 1) / nt);
  fn(0, int64_t(0), n / nt);
  for (auto& th : pool) th.join();
}

// A buffer for random access: 2 MiB aligned and marked for transparent huge pages, so the random
// swaps of a shuffle over hundreds of MB do not each pay a TLB miss (a page walk per swap).
template <typename T>
T* alloc_random_access(int64_t count) {
  constexpr size_t kHuge = size_t(1) << 21;
  const size_t bytes = std::max<size_t>(kHuge, (size_t(count) * sizeof(T) + kHuge - 1) / kHuge * kHuge);
  void* p = std::aligned_alloc(kHuge, bytes);
  if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
  madvise(p, bytes, MADV_HUGEPAGE);
#endif
  return static_cast<T*>(p);
}

// A numpy array of `rows` x `cols` (cols == 0: 1-D) for an output. From 1 MiB on it owns a huge-page buffer:
// besides the shuffles' random access, every output is written once in full, and first-touch page faults on
// 4 KiB pages cost ~0.3 ms per MB here (12 ms for a 40 MB array, 5 ms on huge pages). Smaller arrays come
// from numpy's allocator (a huge page per tiny array would waste memory).
template <typename T>
py::array_t<T> output_array(int64_t rows, int64_t cols, T** data) {
  const int64_t count = rows * std::max<int64_t>(cols, 1);
  std::vector<py::ssize_t> shape{rows}, strides{py::ssize_t(sizeof(T)) * std::max<int64_t>(cols, 1)};
  if (cols > 0) {
    shape.push_back(cols);
    strides.push_back(sizeof(T));
  }
  if (count * int64_t(sizeof(T)) < (int64_t(1) << 20)) {
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
  py::array_t<int32_t> doc_out = output_array<int32_t>(total, 0, &out_doc);
  py::array_t<int32_t> len_out = output_array<int32_t>(total, 0, &out_len);
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

// lengths: int32 length of each document-index entry. Row k (k = 1..num_samples) is the entry
// holding global token k*seq_length and the offset of that token in it; row 0 is (0, 0).
template <typename T>
py::array_t<T> build_sample_index(py::array_t<int32_t, py::array::c_style> lengths, int64_t seq_length,
                                  int64_t num_samples) {
  if (seq_length <= 0 || num_samples < 0) throw std::invalid_argument("bad seq_length or num_samples");
  const int64_t m = lengths.shape(0);
  T* row = nullptr;
  py::array_t<T> out = output_array<T>(num_samples + 1, 2, &row);
  const int32_t* len = lengths.data();
  {
    py::gil_scoped_release release;
    row[0] = 0;
    row[1] = 0;
    // Pass 1: tokens per chunk of entries; exclusive scan; pass 2: each chunk writes the rows whose
    // token k*L falls inside it (a merge walk of entry ends against multiples of L).
    const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(num_threads(), m / kParallelGrain));
    std::vector<int64_t> chunk_tokens(nt + 1, 0);
    auto chunk_begin = [=](int64_t c) { return m * c / nt; };
    std::vector<std::thread> pool;
    // Pass 1 needs the token counts of chunks 0..nt-2 only (the last chunk needs just its start): thread t
    // sums the t-th of nt slices of each of them.
    std::vector<int64_t> slice_tokens(size_t(nt * nt), 0);
    auto sum_slices = [&, len](int64_t t) {
      for (int64_t c = 0; c + 1 < nt; ++c) {
        const int64_t b = chunk_begin(c), n = chunk_begin(c + 1) - b;
        int64_t sum = 0;
        for (int64_t e = b + n * t / nt; e < b + n * (t + 1) / nt; ++e) sum += len[e];
        slice_tokens[size_t(c * nt + t)] = sum;
      }
    };
    // Most entries hold no boundary or one (documents are usually shorter than a sample), at random: the first
    // row of an entry is written without a branch (to a scratch row when the entry holds no boundary: row k may
    // belong to the next chunk's thread) and only entries holding two or more boundaries take the loop.
    // Everything the loop reads is copied into locals first: it writes through a computed pointer, so the
    // compiler would otherwise reload captured variables from the calling thread's stack each entry, next to
    // that thread's own scratch row, whose line it rewrites every entry (false sharing: the second thread ran
    // 1.7x slower than the first).
    auto walk_chunk = [&, row, len](int64_t c) {
      const int64_t seq = seq_length, last = num_samples, e_end = chunk_begin(c + 1);
      int64_t start = chunk_tokens[c];
      int64_t k = std::max<int64_t>(1, (start + seq - 1) / seq);
      int64_t pos = k * seq;
      alignas(64) T scratch[64 / sizeof(T)];
      for (int64_t e = chunk_begin(c); e < e_end && k <= last; ++e) {
        const int64_t end = start + len[e];
        // masks, not ?: -- GCC turns a select of two addresses back into the mispredicting branch
        const uint64_t hit = uint64_t(pos < end);
        const uint64_t all = 0 - hit;
        T* dst = reinterpret_cast<T*>((uintptr_t(row + 2 * k) & all) | (uintptr_t(scratch) & ~all));
        dst[0] = T(e);
        dst[1] = T(pos - start);
        k += int64_t(hit);
        pos += seq & int64_t(all);
        if (__builtin_expect(pos < end, 0)) {
          while (pos < end && k <= last) {
            row[2 * k] = T(e);
            row[2 * k + 1] = T(pos - start);
            ++k;
            pos += seq;
          }
        }
        start = end;
      }
    };
    if (nt > 1) {
      for (int64_t t = 1; t < nt; ++t) pool.emplace_back(sum_slices, t);
      sum_slices(0);
      for (auto& th : pool) th.join();
      pool.clear();
      for (int64_t c = 1; c < nt; ++c) {
        chunk_tokens[c] = chunk_tokens[c - 1];
        for (int64_t t = 0; t < nt; ++t) chunk_tokens[c] += slice_tokens[size_t((c - 1) * nt + t)];
      }
    }
    for (int64_t c = 1; c < nt; ++c) pool.emplace_back(walk_chunk, c);
    walk_chunk(0);
    for (auto& th : pool) th.join();
  }
  return out;
}

template <typename T>
py::array_t<T> build_shuffle_index(int64_t first, int64_t total, RandomState& state) {
  T* x = nullptr;
  py::array_t<T> out = output_array<T>(total, 0, &x);
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

// Greedy blend: sample k goes to argmax_i (w_i * max(k, 1) - c_i), ties to the lowest i.
// The counts are kept as doubles (exact below 2^53), so each error is the same two IEEE operations
// (a multiply, then a subtract; never fused) megatron performs. The argmax of its strict '>' scan is
// the lowest index holding the maximum value, which is what both paths below compute.
template <typename I>
void blend_scalar(const double* w, double* c, int64_t k_count, int64_t s_begin, int64_t s_end, I* di, int64_t* dsi) {
  di -= s_begin;
  dsi -= s_begin;
  for (int64_t s = s_begin; s < s_end; ++s) {
    const double kd = std::max(static_cast<double>(s), 1.0);
    int64_t best = 0;
    double best_err = w[0] * kd - c[0];
    for (int64_t i = 1; i < k_count; ++i) {
      const double err = w[i] * kd - c[i];
      if (err > best_err) {
        best_err = err;
        best = i;
      }
    }
    di[s] = static_cast<I>(best);
    dsi[s] = static_cast<int64_t>(c[best]);
    c[best] += 1.0;
  }
}

// AVX2, 4 datasets per vector: errors and their maximum in SIMD, then the first lane equal to the
// maximum. Padding lanes have weight 0 and count +inf, so their error is -inf and never wins.
template <typename I>
__attribute__((target("avx2"))) void blend_avx2(const double* w_in, double* c_in, int64_t k_count, int64_t s_begin,
                                                int64_t s_end, I* di, int64_t* dsi) {
  di -= s_begin;
  dsi -= s_begin;
  const int64_t nv = (k_count + 3) / 4;
  std::vector<double> wbuf(nv * 4 + 4, 0.0), cbuf(nv * 4 + 4, std::numeric_limits<double>::infinity());
  // 32-byte aligned views
  double* w = reinterpret_cast<double*>((reinterpret_cast<uintptr_t>(wbuf.data()) + 31) & ~uintptr_t(31));
  double* c = reinterpret_cast<double*>((reinterpret_cast<uintptr_t>(cbuf.data()) + 31) & ~uintptr_t(31));
  for (int64_t i = 0; i < nv * 4; ++i) {
    w[i] = i < k_count ? w_in[i] : 0.0;
    c[i] = i < k_count ? c_in[i] : std::numeric_limits<double>::infinity();
  }
  alignas(32) double err[256];
  alignas(32) static const double one_hot[16] = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  const __m256d neg_inf = _mm256_set1_pd(-std::numeric_limits<double>::infinity());
  for (int64_t s = s_begin; s < s_end; ++s) {
    const __m256d kd = _mm256_set1_pd(std::max(static_cast<double>(s), 1.0));
    // two independent max chains halve the dependent latency of the reduction
    __m256d mx0 = neg_inf, mx1 = neg_inf;
    int64_t v = 0;
    for (; v + 1 < nv; v += 2) {
      const __m256d e0 = _mm256_sub_pd(_mm256_mul_pd(_mm256_load_pd(w + 4 * v), kd), _mm256_load_pd(c + 4 * v));
      const __m256d e1 =
          _mm256_sub_pd(_mm256_mul_pd(_mm256_load_pd(w + 4 * v + 4), kd), _mm256_load_pd(c + 4 * v + 4));
      _mm256_store_pd(err + 4 * v, e0);
      _mm256_store_pd(err + 4 * v + 4, e1);
      mx0 = _mm256_max_pd(mx0, e0);
      mx1 = _mm256_max_pd(mx1, e1);
    }
    if (v < nv) {
      const __m256d e0 = _mm256_sub_pd(_mm256_mul_pd(_mm256_load_pd(w + 4 * v), kd), _mm256_load_pd(c + 4 * v));
      _mm256_store_pd(err + 4 * v, e0);
      mx0 = _mm256_max_pd(mx0, e0);
    }
    const __m256d mx = _mm256_max_pd(mx0, mx1);
    __m128d m2 = _mm_max_pd(_mm256_castpd256_pd128(mx), _mm256_extractf128_pd(mx, 1));
    m2 = _mm_max_pd(m2, _mm_unpackhi_pd(m2, m2));
    const __m256d mall = _mm256_broadcastsd_pd(m2);
    int64_t best = 0;
    for (int64_t v = 0; v < nv; ++v) {
      const int mask = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_load_pd(err + 4 * v), mall, _CMP_EQ_OQ));
      if (mask) {
        best = 4 * v + __builtin_ctz(mask);
        break;
      }
    }
    di[s] = static_cast<I>(best);
    // Update the count with a whole-vector store: the next step reloads c as vectors, and a vector
    // load right after a scalar store to part of it stalls on store forwarding.
    double* cv = c + 4 * (best >> 2);
    const __m256d before = _mm256_load_pd(cv);
    dsi[s] = static_cast<int64_t>(cv[best & 3]);
    _mm256_store_pd(cv, _mm256_add_pd(before, _mm256_load_pd(one_hot + 4 * (best & 3))));
  }
  std::copy(c, c + k_count, c_in);
}

// AVX2 for up to 32 datasets (NV vectors of 4), the counts kept in registers across steps. The loop-carried
// chain is counts -> errors -> maximum -> lanes equal to the maximum -> count update (the compare mask ANDed with
// 1.0), all in vector registers: no memory round trip, no data-dependent branch (the winner's position is
// random, so a branchy search mispredicts). The winner's index (movemask, ctz), the tie check and the
// per-dataset sample counters for dataset_sample_index run beside that chain, not on it. 11 ns per sample for
// 28 datasets here, against 19 ns when the count update went through the winner's index.
template <int NV, typename I>
__attribute__((target("avx2"))) void blend_avx2_registers(const double* w_in, double* counts, int64_t k_count,
                                                          int64_t s_begin, int64_t s_end, I* di, int64_t* dsi) {
  di -= s_begin;
  dsi -= s_begin;
  alignas(32) double wv[4 * NV], cv[4 * NV];
  int64_t taken[4 * NV] = {};
  for (int i = 0; i < 4 * NV; ++i) {
    wv[i] = i < k_count ? w_in[i] : 0.0;
    cv[i] = i < k_count ? counts[i] : std::numeric_limits<double>::infinity();  // padding lanes: error -inf
    taken[i] = i < k_count ? static_cast<int64_t>(counts[i]) : 0;
  }
  __m256d w[NV], c[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    w[v] = _mm256_load_pd(wv + 4 * v);
    c[v] = _mm256_load_pd(cv + 4 * v);
  }
  // lane_masks[b]: all-ones in the lanes of the 4-bit pattern b (a movemask inverted)
  alignas(32) double lane_masks[16][4];
  for (int b = 0; b < 16; ++b)
    for (int l = 0; l < 4; ++l) {
      const uint64_t all = (b >> l) & 1 ? ~uint64_t(0) : 0;
      std::memcpy(&lane_masks[b][l], &all, 8);
    }
  const __m256d one = _mm256_set1_pd(1.0);
  for (int64_t s = s_begin; s < s_end; ++s) {
    const __m256d kd = _mm256_set1_pd(std::max(static_cast<double>(s), 1.0));
    __m256d e[NV], m[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) m[v] = e[v] = _mm256_sub_pd(_mm256_mul_pd(w[v], kd), c[v]);  // no FMA
    // maximum over all lanes: a tree over the vectors, then across the lanes of one
#pragma GCC unroll 8
    for (int width = 1; width < NV; width *= 2) {
#pragma GCC unroll 8
      for (int v = 0; v + width < NV; v += 2 * width) m[v] = _mm256_max_pd(m[v], m[v + width]);
    }
    __m256d mx = _mm256_max_pd(m[0], _mm256_permute2f128_pd(m[0], m[0], 1));
    mx = _mm256_max_pd(mx, _mm256_permute_pd(mx, 0b0101));
    // lanes equal to the maximum: almost always one. The counts take the increment straight from the compare
    // masks, so the GPR path (movemask, tie check, index) stays off the loop-carried chain.
    __m256d hit[NV];
    uint32_t bits = 0;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      hit[v] = _mm256_cmp_pd(e[v], mx, _CMP_EQ_OQ);
      bits |= uint32_t(_mm256_movemask_pd(hit[v])) << (4 * v);
    }
    if (__builtin_expect((bits & (bits - 1)) != 0, 0)) {  // a tie: megatron's strict '>' keeps the lowest index
      bits &= 0u - bits;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) hit[v] = _mm256_load_pd(lane_masks[(bits >> (4 * v)) & 15u]);
    }
    const int best = __builtin_ctz(bits);
    di[s] = static_cast<I>(best);
    dsi[s] = taken[best]++;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) c[v] = _mm256_add_pd(c[v], _mm256_and_pd(hit[v], one));
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) _mm256_store_pd(cv + 4 * v, c[v]);
  std::copy(cv, cv + k_count, counts);
}

// Steps [s_begin, s_end) of the blend from the per-dataset counts c (updated in place); di and dsi receive
// s_end - s_begin entries. The greedy rule depends only on (step, counts), so a stretch can start anywhere.
template <typename I>
void blend_steps(const double* w, double* c, int64_t k_count, int64_t s_begin, int64_t s_end, I* di, int64_t* dsi,
                 bool simd) {
  if (simd && k_count <= 32 && __builtin_cpu_supports("avx2")) {
    switch ((k_count + 3) / 4) {
      case 1: return blend_avx2_registers<1>(w, c, k_count, s_begin, s_end, di, dsi);
      case 2: return blend_avx2_registers<2>(w, c, k_count, s_begin, s_end, di, dsi);
      case 3: return blend_avx2_registers<3>(w, c, k_count, s_begin, s_end, di, dsi);
      case 4: return blend_avx2_registers<4>(w, c, k_count, s_begin, s_end, di, dsi);
      case 5: return blend_avx2_registers<5>(w, c, k_count, s_begin, s_end, di, dsi);
      case 6: return blend_avx2_registers<6>(w, c, k_count, s_begin, s_end, di, dsi);
      case 7: return blend_avx2_registers<7>(w, c, k_count, s_begin, s_end, di, dsi);
      default: return blend_avx2_registers<8>(w, c, k_count, s_begin, s_end, di, dsi);
    }
  }
  if (simd && k_count <= 256 && __builtin_cpu_supports("avx2")) return blend_avx2(w, c, k_count, s_begin, s_end, di, dsi);
  blend_scalar(w, c, k_count, s_begin, s_end, di, dsi);
}

// Counts near those of the exact blend after `step` steps: w_i * step rounded, then moved one sample at a time
// (to the dataset furthest behind, or from the one furthest ahead) until they sum to `step`, as exact counts do.
std::vector<double> guess_counts(const std::vector<double>& w, int64_t step) {
  const int64_t k_count = int64_t(w.size());
  const double k = double(step);
  std::vector<double> c(w.size());
  int64_t sum = 0;
  for (int64_t i = 0; i < k_count; ++i) {
    c[i] = std::max(0.0, std::nearbyint(w[i] * k));
    sum += int64_t(c[i]);
  }
  while (sum != step) {
    const bool add = sum < step;
    int64_t pick = -1;
    for (int64_t i = 0; i < k_count; ++i) {
      if (!add && c[i] == 0) continue;
      const double deficit = w[i] * k - c[i], best = pick < 0 ? 0.0 : w[pick] * k - c[pick];
      if (pick < 0 || (add ? deficit > best : deficit < best)) pick = i;
    }
    c[pick] += add ? 1.0 : -1.0;
    sum += add ? 1 : -1;
  }
  return c;
}

// Blends shorter than this run on one thread; the second half's warm-up (steps run before its first output).
int64_t kBlendSplitFrom = int64_t(1) << 19;
int64_t kBlendWarmup = int64_t(1) << 14;
std::atomic<int64_t> blend_splits{0}, blend_reruns{0};  // (tests) how often the split ran, and was redone

// The greedy recurrence is sequential, but the largest-deficit rule forgets where it started: two runs whose
// counts differ a little pick the same datasets once the differences are worked off, and from then on they are
// the same run (the state is just the counts). So the second half starts kBlendWarmup steps early from guessed
// counts, on a second thread, while this thread runs the first half exactly. The second half's counts at the
// midpoint are then compared with the exact ones: equal means its output is exactly the sequential output;
// otherwise (possible with weights far below 1 / kBlendWarmup) the second half is run again from the exact
// counts. Either way the result is bit-identical to one sequential pass.
template <typename I>
void build_blend(const std::vector<double>& w, int64_t size, I* di, int64_t* dsi, bool simd) {
  const int64_t k_count = int64_t(w.size());
  std::vector<double> exact(w.size(), 0.0);
  if (size < kBlendSplitFrom || num_threads() < 2) {
    blend_steps(w.data(), exact.data(), k_count, 0, size, di, dsi, simd);
    return;
  }
  const int64_t mid = size / 2, start = std::max<int64_t>(0, mid - kBlendWarmup);
  std::vector<double> guess = guess_counts(w, start), at_mid;
  std::thread second([&] {
    std::vector<I> scratch_di(size_t(mid - start));
    std::vector<int64_t> scratch_dsi(size_t(mid - start));
    blend_steps(w.data(), guess.data(), k_count, start, mid, scratch_di.data(), scratch_dsi.data(), simd);
    at_mid = guess;
    blend_steps(w.data(), guess.data(), k_count, mid, size, di + mid, dsi + mid, simd);
  });
  blend_steps(w.data(), exact.data(), k_count, 0, mid, di, dsi, simd);
  second.join();
  ++blend_splits;
  if (at_mid != exact) {
    ++blend_reruns;
    blend_steps(w.data(), exact.data(), k_count, mid, size, di + mid, dsi + mid, simd);
  }
}

template <typename I>
py::tuple build_blending_indices(py::array_t<double, py::array::c_style> weights, int64_t size, bool simd) {
  const int64_t k_count = weights.shape(0);
  if (k_count <= 0) throw std::invalid_argument("no datasets to blend");
  if (k_count - 1 > int64_t(std::numeric_limits<I>::max()))
    throw std::invalid_argument("too many datasets for the blend index dtype");
  I* di = nullptr;
  int64_t* dsi = nullptr;
  py::array_t<I> dataset_index = output_array<I>(size, 0, &di);
  py::array_t<int64_t> dataset_sample_index = output_array<int64_t>(size, 0, &dsi);
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
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(num_threads(), n / kParallelGrain));
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
