// Byte-level BPE of one word, as Hugging Face tokenizers' BPE model merges it (models/bpe/word.rs,
// Word::merge_all, without dropout), for the encoder (encoder.h).
//
// A word starts as one symbol per byte (the byte's token id; a byte whose token is not in the vocabulary is
// left out, as HF leaves out an unknown character when there is no unk token). Every adjacent pair that is a
// merge goes on a min-heap ordered by (merge rank, position): the lowest rank first, the leftmost on ties.
// A popped entry is applied unless its left symbol was merged away, has no right neighbour, or the pair now
// at its position no longer gives the entry's new token (HF checks the new id, not the rank: a pair that
// changed into another pair merging to the same token is merged at the popped entry's rank, as HF does).
// After each merge the pairs with the left and right neighbours are pushed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace bloombpe {

// pair (left id, right id) -> (rank, new id): open addressing on one uint64 key, at most half full.
class MergeTable {
 public:
  // merges: n triples (left, right, new id) in rank order; a pair given twice keeps the later rank, as HF's
  // HashMap built from the list does.
  MergeTable(const uint32_t* merges, size_t n) {
    size_t size = 16;
    while (size < 2 * n + 2) size *= 2;
    keys_.assign(size, kEmpty);
    values_.assign(size, 0);
    mask_ = size - 1;
    for (size_t r = 0; r < n; ++r) {
      const uint64_t key = (uint64_t(merges[3 * r]) << 32) | merges[3 * r + 1];
      size_t i = home(key);
      while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
      keys_[i] = key;
      values_[i] = (uint64_t(r) << 32) | merges[3 * r + 2];
    }
  }

  // The merge of (a, b): true with its rank and new id, false when the pair is not a merge.
  bool find(uint32_t a, uint32_t b, uint32_t* rank, uint32_t* id) const {
    const uint64_t key = (uint64_t(a) << 32) | b;
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) {
        *rank = uint32_t(values_[i] >> 32);
        *id = uint32_t(values_[i]);
        return true;
      }
      if (keys_[i] == kEmpty) return false;
    }
  }

  size_t memory() const { return keys_.size() * 16; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // (0xFFFFFFFF, 0xFFFFFFFF) is never a pair of ids
  size_t home(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ULL) >> 20) & mask_; }
  std::vector<uint64_t> keys_, values_;
  size_t mask_ = 0;
};

// The symbols and heap of one word, kept between words to reuse their memory.
class WordMerger {
 public:
  // Appends the token ids of the word [p, p + n) to `out`; byte_ids[b]: the token of byte b, or -1.
  void merge(const unsigned char* p, size_t n, const int32_t* byte_ids, const MergeTable& merges,
             std::vector<uint32_t>* out) {
    symbols_.clear();
    for (size_t i = 0; i < n; ++i) {
      const int32_t id = byte_ids[p[i]];
      if (id < 0) continue;
      const int32_t at = int32_t(symbols_.size());
      symbols_.push_back(Symbol{uint32_t(id), at - 1, at + 1, 1});
    }
    if (symbols_.empty()) return;
    symbols_.back().next = -1;
    heap_.clear();
    for (size_t i = 0; i + 1 < symbols_.size(); ++i) push(merges, uint32_t(i), symbols_[i].c, symbols_[i + 1].c);
    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), Later{});
      const Entry top = heap_.back();
      heap_.pop_back();
      apply(merges, top);
    }
    for (const Symbol& s : symbols_) {
      if (s.len != 0) out->push_back(s.c);
    }
  }

 private:
  struct Symbol {
    uint32_t c;
    int32_t prev, next;
    uint32_t len;  // 0: merged into its left neighbour
  };
  struct Entry {
    uint32_t rank, pos, id;
  };
  struct Later {  // std::*_heap keep the largest first: "larger" is the later merge
    bool operator()(const Entry& a, const Entry& b) const {
      return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
    }
  };

  void push(const MergeTable& merges, uint32_t pos, uint32_t a, uint32_t b) {
    uint32_t rank, id;
    if (!merges.find(a, b, &rank, &id)) return;
    heap_.push_back(Entry{rank, pos, id});
    std::push_heap(heap_.begin(), heap_.end(), Later{});
  }

  void apply(const MergeTable& merges, const Entry& top) {
    Symbol& left = symbols_[top.pos];
    if (left.len == 0 || left.next == -1) return;
    const int32_t right_at = left.next;
    const Symbol right = symbols_[size_t(right_at)];
    uint32_t rank, id;
    if (!merges.find(left.c, right.c, &rank, &id) || id != top.id) return;  // an expired entry
    left.c = top.id;
    left.len += right.len;
    left.next = right.next;
    symbols_[size_t(right_at)].len = 0;
    if (right.next >= 0) symbols_[size_t(right.next)].prev = int32_t(top.pos);
    if (left.prev >= 0) push(merges, uint32_t(left.prev), symbols_[size_t(left.prev)].c, left.c);
    if (left.next >= 0) push(merges, top.pos, left.c, symbols_[size_t(left.next)].c);
  }

  std::vector<Symbol> symbols_;
  std::vector<Entry> heap_;
};

}  // namespace bloombpe
