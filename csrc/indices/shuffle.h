// Fisher-Yates shuffles with exactly numpy RandomState.shuffle's swaps, pipelined over two threads.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "mt19937.h"
#include "threads.h"

namespace bloomindices {

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

}  // namespace bloomindices
