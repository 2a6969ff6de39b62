// Threads and memory for the index builders: how many threads a pass may use, the sizes from which it
// does, a chunked parallel-for, and huge-page buffers for large arrays.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

namespace bloomindices {

// Below these sizes a pass runs on the calling thread alone: starting and joining a thread costs tens of
// microseconds, worth it once the pass takes a few hundred microseconds (a blend's components are mostly
// under 2M entries: with 1M per thread their passes all ran on one thread, 36 vs 26 ms of sample index).
// (variables, not constants, so the tests can lower them to exercise the threaded paths on tiny inputs)
inline int64_t kPipelineFrom = int64_t(1) << 16;  // shuffle: 64K elements
inline int64_t kParallelGrain = int64_t(1) << 18;  // streaming passes: 256K elements per thread
inline int64_t kGatherMaxBytes = int64_t(16) << 20;  // document index: gather lengths from sizes up to 16 MB

// Threads for the parallel passes: OMP_NUM_THREADS if set, else the hardware's. Plain std::threads,
// created per call and joined: OpenMP's idle workers spin after a region and, on a small machine, steal
// the core the (sequential) shuffle runs on.
inline int num_threads() {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) {
    const int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Threads a pass over n elements uses: at least `grain` elements each, at most num_threads().
inline int64_t chunk_threads(int64_t n, int64_t grain) {
  return std::max<int64_t>(1, std::min<int64_t>(num_threads(), n / std::max<int64_t>(grain, 1)));
}

// fn(t, begin, end) over [0, n) split into chunk_threads(n, grain) contiguous chunks, t = 0 on this thread.
template <typename Fn>
void parallel_chunks(int64_t n, int64_t grain, Fn fn) {
  const int64_t nt = chunk_threads(n, grain);
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

}  // namespace bloomindices
