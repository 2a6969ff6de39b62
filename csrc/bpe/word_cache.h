// The encoder's cache of words already merged: word bytes -> token ids (encoder.h).
//
// Natural text repeats its words (Zipf): most pieces of a document were seen a moment ago, and a hit costs a
// hash and a compare instead of a merge. The words' bytes and ids live in two arenas, with an open-addressing
// index of entries (linear probing, at most half full). When `max_words` words are held the cache is emptied
// and refills with the text that comes next (a shard's language changes, the words worth holding change with
// it): memory stays bounded at about max_words * (32 + a word's bytes and ids) bytes.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace bloombpe {

inline uint64_t mix64(uint64_t a, uint64_t b) {
  const __uint128_t r = static_cast<__uint128_t>(a) * b;
  return uint64_t(r) ^ uint64_t(r >> 64);
}

// A fast 64-bit hash of short byte strings (8 bytes a step); not a format: nothing stores it.
inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t(n) * 0xA0761D6478BD642FULL);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = mix64(h ^ v, 0xE7037ED1A0B428DBULL);
    p += 8;
    n -= 8;
  }
  if (n > 0) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = mix64(h ^ v, 0x8EBC6AF09C88C6E3ULL);
  }
  return mix64(h, 0x589965CC75374CC3ULL);
}

class WordCache {
 public:
  static constexpr size_t kMaxWord = 256;  // longer words are not held (HF's cache takes words under 256 too)

  explicit WordCache(size_t max_words) : max_words_(max_words) {
    size_t size = 16;
    while (size < 2 * max_words_ + 2) size *= 2;
    index_.assign(size, Slot{});
    mask_ = size - 1;
  }

  // The ids of word [p, p + n) with hash h: a pointer to `*count` ids, or nullptr when not held.
  const uint32_t* find(const char* p, size_t n, uint64_t h, size_t* count) const {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = index_[i];
      if (s.key_len == kFree) return nullptr;
      if (s.hash == h && s.key_len == n && std::memcmp(keys_.data() + s.key_at, p, n) == 0) {
        *count = s.ids_len;
        return ids_.data() + s.ids_at;
      }
    }
  }

  // Holds ids [ids, ids + count) for word [p, p + n) with hash h (not held yet).
  void insert(const char* p, size_t n, uint64_t h, const uint32_t* ids, size_t count) {
    if (n > kMaxWord || max_words_ == 0) return;
    if (words_ >= max_words_) clear();
    size_t i = h & mask_;
    while (index_[i].key_len != kFree) i = (i + 1) & mask_;
    index_[i] = Slot{h, uint32_t(keys_.size()), uint32_t(ids_.size()), uint32_t(n), uint32_t(count)};
    keys_.insert(keys_.end(), p, p + n);
    ids_.insert(ids_.end(), ids, ids + count);
    ++words_;
  }

  void clear() {
    std::fill(index_.begin(), index_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    words_ = 0;
  }

  size_t words() const { return words_; }
  size_t memory() const { return index_.size() * sizeof(Slot) + keys_.capacity() + ids_.capacity() * 4; }

 private:
  static constexpr uint32_t kFree = ~uint32_t(0);
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_at = 0, ids_at = 0;  // in the arenas: under 4 GB (max_words words of at most kMaxWord bytes)
    uint32_t key_len = kFree, ids_len = 0;
  };
  size_t max_words_;
  std::vector<Slot> index_;
  std::vector<char> keys_;
  std::vector<uint32_t> ids_;
  size_t mask_ = 0, words_ = 0;
};

}  // namespace bloombpe
