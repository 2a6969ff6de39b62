// The counting pass's word -> count table (bloomdata/tokenizer/counting.py), on compact arrays.
//
// A word is a byte string (the UTF-8 of one piece of BLOOM's split). The words are kept in the order first
// seen: their bytes concatenated in one arena, with a uint64 start, a uint32 length and a uint64 count each,
// and an open-addressing index of uint32 word numbers (linear probing, at most half full, homed by the hash's
// high bits: the words of one partition share the low bits xxh64 % P looks at). That is ~28 bytes
// a word plus its bytes, against ~150-200 for a CPython dict of str -> int. `take` hands the words out
// grouped by their word-count-file partition, xxh64(word) % P, each group in the order first seen: the
// bytes bloomdata/tokenizer/word_counts.py writes for the same counts in a dict, so a file is the same
// whichever counter filled it.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "buffer.h"
#include "xxh64.h"

namespace bloombpe {

class WordCounter {
 public:
  size_t words() const { return counts_.size(); }
  size_t word_bytes() const { return bytes_.size(); }
  // Bytes held (the index, the per-word arrays and the arena, by their sizes, not capacities).
  size_t memory() const { return index_.size() * 4 + words() * 20 + bytes_.size(); }

  // Adds `count` occurrences of the word [p, p + n).
  void add(const char* p, size_t n, uint64_t count) {
    if (n > UINT32_MAX) throw std::length_error("a word of over 4 GB");
    if (2 * (words() + 1) > index_.size()) grow();
    const size_t mask = index_.size() - 1;
    for (size_t i = home(xxh64(p, n));; i = (i + 1) & mask) {
      const uint32_t slot = index_[i];
      if (slot == 0) {
        index_[i] = uint32_t(words() + 1);
        break;
      }
      const uint32_t w = slot - 1;
      if (lengths_[w] == n && std::memcmp(bytes_.data() + starts_[w], p, n) == 0) {
        counts_[w] += count;
        return;
      }
    }
    starts_.push_back(bytes_.size());
    lengths_.push_back(uint32_t(n));
    counts_.push_back(count);
    const size_t at = bytes_.size();
    bytes_.resize(at + n);
    if (n) std::memcpy(bytes_.data() + at, p, n);
  }

  // The words grouped by partition (xxh64 % partitions), first-seen order within each: word_at[p] is the
  // first word of partition p (partitions + 1 entries), and word i of the output is `counts[i]` times the
  // bytes blob[sum(lengths[:i]) : ... + lengths[i]]. Output arrays are the caller's, sized words() (blob:
  // word_bytes()). The counter is unchanged.
  void take(size_t partitions, uint64_t* word_at, uint64_t* counts, uint32_t* lengths, char* blob) const {
    const size_t n = words();
    Buffer<uint32_t> part;
    part.resize(n);
    for (size_t p = 0; p <= partitions; ++p) word_at[p] = 0;
    for (size_t w = 0; w < n; ++w) {
      part[w] = uint32_t(xxh64(bytes_.data() + starts_[w], lengths_[w]) % partitions);
      ++word_at[part[w] + 1];
    }
    for (size_t p = 0; p < partitions; ++p) word_at[p + 1] += word_at[p];
    Buffer<uint64_t> next;  // the next output slot and its blob offset, per partition
    next.resize(2 * partitions);
    for (size_t p = 0; p < partitions; ++p) next[2 * p] = word_at[p], next[2 * p + 1] = 0;
    for (size_t w = 0; w < n; ++w) next[2 * part[w] + 1] += lengths_[w];  // bytes per partition
    for (size_t p = 0, at = 0; p < partitions; ++p) {
      const uint64_t b = next[2 * p + 1];
      next[2 * p + 1] = at;
      at += b;
    }
    for (size_t w = 0; w < n; ++w) {
      uint64_t& slot = next[2 * part[w]];
      uint64_t& at = next[2 * part[w] + 1];
      counts[slot] = counts_[w];
      lengths[slot] = lengths_[w];
      std::memcpy(blob + at, bytes_.data() + starts_[w], lengths_[w]);
      ++slot;
      at += lengths_[w];
    }
  }

  // Forgets every word and gives the memory back.
  void clear() {
    for (auto* b : {&starts_, &counts_}) b->clear(), b->shrink();
    lengths_.clear(), lengths_.shrink();
    bytes_.clear(), bytes_.shrink();
    index_.clear(), index_.shrink();
    shift_ = 64;
  }

 private:
  void grow() {
    const size_t size = index_.size() ? 2 * index_.size() : 1024, mask = size - 1;
    shift_ = 64;
    for (size_t s = size; s > 1; s >>= 1) --shift_;
    index_.assign(size, 0);
    for (size_t w = 0; w < words(); ++w) {
      size_t i = home(xxh64(bytes_.data() + starts_[w], lengths_[w]));
      while (index_[i] != 0) i = (i + 1) & mask;
      index_[i] = uint32_t(w + 1);
    }
  }

  Buffer<char> bytes_;  // the words' bytes, first-seen order
  Buffer<uint64_t> starts_, counts_;
  Buffer<uint32_t> lengths_;
  Buffer<uint32_t> index_;  // word number + 1, 0: empty; a power of two
  int shift_ = 64;           // 64 - log2(index_.size())

  size_t home(uint64_t hash) const { return size_t(hash >> shift_); }
};

}  // namespace bloombpe
