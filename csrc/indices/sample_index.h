// The sample index: row k (k = 1..num_samples) is the document-index entry holding global token k*seq_length
// and the offset of that token in it; row 0 is (0, 0) (docs/megatron-data.md, "Sample index").
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

#include "threads.h"

namespace bloomindices {

// len: int32 length of each of the m document-index entries; row: (num_samples + 1) x 2 values of T.
template <typename T>
void sample_index_rows(const int32_t* len, int64_t m, int64_t seq_length, int64_t num_samples, T* row) {
  row[0] = 0;
  row[1] = 0;
  // Pass 1: tokens per chunk of entries; exclusive scan; pass 2: each chunk writes the rows whose
  // token k*L falls inside it (a merge walk of entry ends against multiples of L).
  const int64_t nt = chunk_threads(m, kParallelGrain);
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

}  // namespace bloomindices
