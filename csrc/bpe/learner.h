// The merge loop of Hugging Face's BpeTrainer over word counts, on compact arrays.
//
// The algorithm, its order of merges and its one arbitrary choice are documented in
// bloomdata/tokenizer/merges.py (the Python reference of this file; the tests compare both with HF's
// trainer). Memory, for W distinct words of S symbols in all, P pairs with a nonzero count and E queued
// entries:
//   - the words: S uint32 symbols, merged in place (a word only shrinks), W + 1 int64 offsets and W uint64
//     counts (the caller's arrays), W uint32 lengths;
//   - the pair counts: 64 open-addressing tables of (uint64 key + 1, int64 count), 16 bytes a slot, each
//     47-70% full: 23-34 bytes per pair. A count that falls to 0 gives its slot back;
//   - the queue: 20 bytes per entry (count, pair, entry number) and 12 for its word list's place;
//   - the word lists: each entry's words, ascending, as LEB128 varints of their differences (~2 bytes a
//     word number instead of 4) in one arena. The initial lists hold at most S numbers and each merge in
//     a word adds at most two. A merged entry's list is dead: the arena is compacted (in entry order, in
//     place) once its dead bytes pass half of the live ones, so it holds at most 1.5x the live lists;
//   - per merge step, 8 bytes per pair it forms in a word (the new token is one side of every pair formed,
//     so the other side and the word fit a uint64), given back after a large step.
//     An entry whose count is below max(min_frequency, 1) is never queued: it could only pop once every
//     count is that low, where HF's loop ends (bloomdata/tokenizer/merges.py), so rare pairs cost no list.
// Every growing array is a Buffer: on Linux an anonymous mapping that grows and shrinks in place (mremap),
// so growing never holds an old and a new copy at once (std::vector's doubling does: 2x at the peak); a
// pair table that grows copies 1/64 of the counts. Measured (bloomdata/tokenizer/merges.py, learner_bytes):
// 9.6-13.9 bytes per symbol above the caller's arrays, half of what std::vector's and one table's took.
// So memory follows the distinct words, not the text they came from.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "buffer.h"

namespace bloombpe {

inline uint64_t pair_key(uint32_t left, uint32_t right) { return (uint64_t(left) << 32) | right; }

inline uint64_t mix(uint64_t x) {  // splitmix64's finalizer: pair keys are far from random
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Pair key -> count, open addressing with linear probing over a table 47-70% full (it grows by half). A
// slot holds key + 1 (0: empty; symbol ids stay below UINT32_MAX, so key + 1 never wraps). A count that
// falls to 0 frees its slot (backward-shift deletion, no tombstones): a pair absent and a pair at 0 are the
// same to the loop, and many pairs a merge breaks never come back. `hash` is mix(key).
class PairTable {
 public:
  explicit PairTable(size_t expected = 0) { rehash(std::max<size_t>(16, expected * 10 / 7 + 1)); }

  // Adds `delta` to the count of `key` (0 when absent).
  void add(uint64_t key, uint64_t hash, int64_t delta) {
    size_t i = find(key, hash);
    if (slots_[i].key == 0) {
      if (delta == 0) return;
      if ((size_ + 1) * 10 > slots_.size() * 7) {
        rehash(slots_.size() + slots_.size() / 2);
        i = find(key, hash);
      }
      slots_[i] = Slot{key + 1, 0};
      ++size_;
    }
    slots_[i].count += delta;
    if (slots_[i].count == 0) erase(i);
  }

  // The count of `key`; 0 when absent.
  int64_t get(uint64_t key, uint64_t hash) const {
    const Slot& slot = slots_[find(key, hash)];
    return slot.key == 0 ? 0 : slot.count;
  }

 private:
  struct Slot {
    uint64_t key;  // pair key + 1; 0 when empty
    int64_t count;
  };

  // The key's home slot: its hash scaled to the table's size (any size, not only powers of two).
  size_t home(uint64_t hash) const {
    return size_t((static_cast<unsigned __int128>(hash) * slots_.size()) >> 64);
  }
  size_t next(size_t i) const { return i + 1 == slots_.size() ? 0 : i + 1; }

  // The slot of `key`, or the empty slot where it would go.
  size_t find(uint64_t key, uint64_t hash) const {
    size_t i = home(hash);
    while (slots_[i].key != 0 && slots_[i].key != key + 1) i = next(i);
    return i;
  }

  // Empties slot `hole` and moves back each later key of its run that may fill it (Knuth's algorithm R).
  void erase(size_t hole) {
    for (size_t i = next(hole);; i = next(i)) {
      if (slots_[i].key == 0) break;
      const size_t h = home(mix(slots_[i].key - 1));
      // the key at i may move to the hole unless its home lies cyclically in (hole, i]
      const bool stays = hole <= i ? (hole < h && h <= i) : (hole < h || h <= i);
      if (!stays) {
        slots_[hole] = slots_[i];
        hole = i;
      }
    }
    slots_[hole] = Slot{0, 0};
    --size_;
  }

  void rehash(size_t capacity) {
    Buffer<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{0, 0});
    for (const Slot& s : old) {
      if (s.key != 0) slots_[find(s.key - 1, mix(s.key - 1))] = s;
    }
  }

  Buffer<Slot> slots_;
  size_t size_ = 0;
};

// PairTable cut in 64 by the hash's low bits (a table's home slot comes from its high bits): a table that
// grows copies 1/64 of the counts, where one table would hold the old and the new copy of all of them at once.
class PairCounts {
 public:
  explicit PairCounts(size_t expected = 0) {
    for (auto& table : tables_) table = PairTable(expected / kTables);
  }
  void add(uint64_t key, int64_t delta) {
    const uint64_t hash = mix(key);
    tables_[hash % kTables].add(key, hash, delta);
  }
  int64_t get(uint64_t key) const {
    const uint64_t hash = mix(key);
    return tables_[hash % kTables].get(key, hash);
  }

 private:
  static constexpr size_t kTables = 64;
  PairTable tables_[kTables];
};

// Pair -> dense index (first seen first) of the initial pairs, while their lists are built: their symbols
// are the initial vocabulary's ids, so a table of vocabulary^2 indexes (~260^2 for the byte alphabet) when
// that is small, else a hash map.
class PairIndex {
 public:
  explicit PairIndex(size_t vocab) : vocab_(vocab) {
    if (vocab <= kDenseVocab) dense_.assign(vocab * vocab, kNone);
  }

  // The index of (left, right), the next index when it is new.
  uint32_t index(uint32_t left, uint32_t right) {
    if (!dense_.empty()) {
      uint32_t& at = dense_[size_t(left) * vocab_ + right];
      if (at == kNone) at = uint32_t(size_++);
      return at;
    }
    const auto found = sparse_.emplace(pair_key(left, right), uint32_t(size_));
    if (found.second) ++size_;
    return found.first->second;
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  static constexpr size_t kDenseVocab = 4096;  // 64 MB of indexes at most
  size_t vocab_, size_ = 0;
  std::vector<uint32_t> dense_;
  std::unordered_map<uint64_t, uint32_t> sparse_;
};

// The word lists: LEB128 varints of ascending word numbers' differences (the first from 0).
inline size_t varint_bytes(uint32_t v) {
  return v < (1u << 7) ? 1 : v < (1u << 14) ? 2 : v < (1u << 21) ? 3 : v < (1u << 28) ? 4 : 5;
}

inline uint8_t* put_varint(uint8_t* at, uint32_t v) {
  while (v >= 0x80) {
    *at++ = uint8_t(v | 0x80);
    v >>= 7;
  }
  *at++ = uint8_t(v);
  return at;
}

inline const uint8_t* get_varint(const uint8_t* at, uint32_t* v) {
  uint32_t out = 0;
  for (int shift = 0;; shift += 7) {
    const uint8_t byte = *at++;
    out |= uint32_t(byte & 0x7F) << shift;
    if (byte < 0x80) break;
  }
  *v = out;
  return at;
}

// A queued entry: HF's `Merge` (count, pair, words). Its words are entry_list_[entry] in the arena. Packed
// to 20 bytes (24 with padding): the queue holds one per entry.
#pragma pack(push, 4)
struct Item {
  uint64_t count;  // as HF keeps it: the pair's count when (re)queued, cast to unsigned
  uint64_t key;
  uint32_t entry;
};
#pragma pack(pop)
static_assert(sizeof(Item) == 20, "Item is packed");

// Largest count first, then the smaller pair, then the entry queued first (the heap pops the largest under
// this "less").
struct ItemLess {
  bool operator()(const Item& x, const Item& y) const {
    if (x.count != y.count) return x.count < y.count;
    if (x.key != y.key) return x.key > y.key;
    return x.entry > y.entry;
  }
};

struct Words {
  uint32_t* symbols;        // every word's symbols; word w starts at offsets[w]
  const int64_t* offsets;   // W + 1 entries
  const uint64_t* counts;   // W entries
  size_t n;                 // W
};

class Learner {
 public:
  Learner(Words words, std::vector<std::string> vocab, size_t vocab_size, uint64_t min_frequency)
      : words_(words), vocab_(std::move(vocab)), vocab_size_(vocab_size), min_frequency_(min_frequency),
        floor_(int64_t(std::max<uint64_t>(min_frequency, 1))), lengths_(words.n) {
    for (size_t i = 0; i < vocab_.size(); ++i) ids_.emplace(vocab_[i], uint32_t(i));
    for (size_t w = 0; w < words.n; ++w) lengths_[w] = uint32_t(words.offsets[w + 1] - words.offsets[w]);
  }

  // Runs the loop; `tick(merges so far)` is called every `every` merges (progress).
  template <typename Tick>
  void run(Tick&& tick, size_t every) {
    count_pairs();
    while (ids_.size() < vocab_size_ && !queue_.empty()) {
      std::pop_heap(queue_.begin(), queue_.end(), ItemLess());
      Item top = queue_.back();
      queue_.pop_back();
      const uint64_t current = uint64_t(pair_counts_.get(top.key));
      if (top.count != current) {
        top.count = current;
        push(top);
        continue;
      }
      if (top.count < 1 || min_frequency_ > top.count) break;
      merge(top);
      if (merges_.size() % every == 0) tick(merges_.size());
    }
  }

  const std::vector<std::string>& vocab() const { return vocab_; }
  const std::vector<std::pair<uint32_t, uint32_t>>& merges() const { return merges_; }

 private:
  // Pair counts, and one entry per pair at or above the floor listing the words it occurs in. Three passes
  // over the words: counts and each list's size, then the lists written in place into the arena.
  void count_pairs() {
    constexpr uint32_t kNone = UINT32_MAX;
    PairIndex index(vocab_.size());
    std::vector<uint64_t> keys;
    std::vector<int64_t> counts;
    std::vector<uint32_t> last, listed;  // per pair: the last word listed, and how many words
    std::vector<uint64_t> place;         // per pair: bytes of its list, then where the next number goes
    const auto gap = [&](uint32_t p, size_t w) {  // what word w adds to pair p's list (the first: w itself)
      return last[p] == kNone ? uint32_t(w) : uint32_t(w) - last[p];
    };
    for (size_t w = 0; w < words_.n; ++w) {
      const uint32_t* s = words_.symbols + words_.offsets[w];
      for (uint32_t i = 0; i + 1 < lengths_[w]; ++i) {
        const uint32_t p = index.index(s[i], s[i + 1]);
        if (p == keys.size()) {
          keys.push_back(pair_key(s[i], s[i + 1]));
          counts.push_back(0);
          last.push_back(kNone);
          listed.push_back(0);
          place.push_back(0);
        }
        counts[p] += int64_t(words_.counts[w]);
        if (last[p] != w) {
          place[p] += varint_bytes(gap(p, w));
          last[p] = uint32_t(w);
          ++listed[p];
        }
      }
    }
    const size_t pairs = keys.size();
    pair_counts_ = PairCounts(pairs);
    uint64_t total = 0;
    for (size_t p = 0; p < pairs; ++p) {
      pair_counts_.add(keys[p], counts[p]);
      const uint64_t bytes = counts[p] >= floor_ ? place[p] : 0;
      place[p] = total;
      total += bytes;
    }
    lists_.resize(total);
    // entries in pair order (first seen), the order the queue's ties need (none can occur among them)
    for (size_t p = 0; p < pairs; ++p) {
      if (counts[p] < floor_) continue;
      queue_.push_back(Item{uint64_t(counts[p]), keys[p], uint32_t(entry_list_.size())});
      entry_list_.push_back(place[p]);
      entry_words_.push_back(listed[p]);
    }
    std::fill(last.begin(), last.end(), kNone);
    for (size_t w = 0; w < words_.n; ++w) {
      const uint32_t* s = words_.symbols + words_.offsets[w];
      for (uint32_t i = 0; i + 1 < lengths_[w]; ++i) {
        const uint32_t p = index.index(s[i], s[i + 1]);
        if (counts[p] >= floor_ && last[p] != w) {
          place[p] = uint64_t(put_varint(lists_.data() + place[p], gap(p, w)) - lists_.data());
          last[p] = uint32_t(w);
        }
      }
    }
    std::make_heap(queue_.begin(), queue_.end(), ItemLess());
  }

  void push(const Item& item) {
    queue_.push_back(item);
    std::push_heap(queue_.begin(), queue_.end(), ItemLess());
  }

  // HF's Word::merge over one word, in place: (a, b) -> token, left to right. Each merge lowers the counts
  // of the neighbouring pairs it breaks and raises those it forms; a formed pair is noted as (the other
  // side, the word) in formed_left_ (other, token) or formed_right_ (token, other).
  void merge_word(uint32_t w, uint32_t a, uint32_t b, uint32_t token) {
    uint32_t* s = words_.symbols + words_.offsets[w];
    const uint32_t n = lengths_[w];
    const int64_t count = int64_t(words_.counts[w]);
    uint32_t out = 0, r = 0;
    while (r < n) {
      if (s[r] == a && r + 1 < n && s[r + 1] == b) {
        if (out > 0) {
          pair_counts_.add(pair_key(s[out - 1], a), -count);
          pair_counts_.add(pair_key(s[out - 1], token), count);
          formed_left_.push_back((uint64_t(s[out - 1]) << 32) | w);
        }
        if (r + 2 < n) {
          pair_counts_.add(pair_key(b, s[r + 2]), -count);
          pair_counts_.add(pair_key(token, s[r + 2]), count);
          formed_right_.push_back((uint64_t(s[r + 2]) << 32) | w);
        }
        s[out++] = token;
        r += 2;
      } else {
        s[out++] = s[r++];
      }
    }
    lengths_[w] = out;
  }

  void merge(const Item& top) {
    const uint32_t a = uint32_t(top.key >> 32), b = uint32_t(top.key);
    std::string joined = vocab_[a] + vocab_[b];
    auto found = ids_.find(joined);
    uint32_t token;
    if (found != ids_.end()) {
      token = found->second;
    } else {
      token = uint32_t(vocab_.size());
      ids_.emplace(joined, token);
      vocab_.push_back(std::move(joined));
    }
    merges_.emplace_back(a, b);
    // the entry's words, then its list is dead (nothing appends to the arena while it is read)
    const uint8_t* const start = lists_.data() + entry_list_[top.entry];
    const uint8_t* at = start;
    uint32_t w = 0;
    for (uint32_t i = 0, n = entry_words_[top.entry]; i < n; ++i) {
      uint32_t delta;
      at = get_varint(at, &delta);
      w += delta;
      merge_word(w, a, b, token);
    }
    dead_bytes_ += uint64_t(at - start);
    entry_words_[top.entry] = 0;
    queue_formed(token);
    constexpr size_t kKeep = size_t(1) << 16;  // what one very common pair grew is given back
    formed_left_.clear();  // empty for the next step
    formed_right_.clear();
    words_buffer_.clear();
    formed_left_.shrink(kKeep);
    formed_right_.shrink(kKeep);
    words_buffer_.shrink(kKeep);
    if (dead_bytes_ * 2 > lists_.size() - dead_bytes_) compact();
  }

  // Queues, in pair order, one entry per pair formed this step with a count at or above the floor, listing
  // the words it was formed in. (token, token) can be noted on both sides: its words are joined.
  void queue_formed(uint32_t token) {
    for (auto* formed : {&formed_left_, &formed_right_}) {
      std::sort(formed->begin(), formed->end());
      formed->resize(size_t(std::unique(formed->begin(), formed->end()) - formed->begin()));
    }
    const auto key_of = [&](bool left, uint64_t f) {
      return left ? pair_key(uint32_t(f >> 32), token) : pair_key(token, uint32_t(f >> 32));
    };
    size_t i = 0, j = 0;
    const auto& L = formed_left_;
    const auto& R = formed_right_;
    while (i < L.size() || j < R.size()) {
      const uint64_t key = std::min(i < L.size() ? key_of(true, L[i]) : UINT64_MAX,
                                    j < R.size() ? key_of(false, R[j]) : UINT64_MAX);
      size_t i2 = i, j2 = j;
      while (i2 < L.size() && key_of(true, L[i2]) == key) ++i2;
      while (j2 < R.size() && key_of(false, R[j2]) == key) ++j2;
      const int64_t count = pair_counts_.get(key);
      if (count >= floor_) {
        words_buffer_.clear();
        for (size_t k = i; k < i2; ++k) words_buffer_.push_back(uint32_t(L[k]));
        for (size_t k = j; k < j2; ++k) words_buffer_.push_back(uint32_t(R[k]));
        if (i2 > i && j2 > j) {  // (token, token): a word may be on both sides
          std::sort(words_buffer_.begin(), words_buffer_.end());
          words_buffer_.resize(size_t(std::unique(words_buffer_.begin(), words_buffer_.end()) -
                                      words_buffer_.begin()));
        }
        push(Item{uint64_t(count), key, uint32_t(entry_list_.size())});
        entry_list_.push_back(append_list());
        entry_words_.push_back(uint32_t(words_buffer_.size()));
      }
      i = i2;
      j = j2;
    }
  }

  // words_buffer_ (ascending) as a new list at the arena's end; returns where it starts.
  uint64_t append_list() {
    const size_t start = lists_.size();
    lists_.resize(start + 5 * words_buffer_.size());  // a varint takes at most 5 bytes
    uint8_t* at = lists_.data() + start;
    uint32_t previous = 0;
    for (uint32_t w : words_buffer_) {
      at = put_varint(at, w - previous);
      previous = w;
    }
    lists_.resize(size_t(at - lists_.data()));
    return start;
  }

  // Moves every live list down over the dead ones, in entry order (the arena holds them in that order),
  // and gives back the arena's tail.
  void compact() {
    uint8_t* const base = lists_.data();
    uint64_t to = 0;
    for (size_t e = 0; e < entry_list_.size(); ++e) {
      if (entry_words_[e] == 0) continue;
      const uint8_t* from = base + entry_list_[e];
      const uint8_t* at = from;
      for (uint32_t i = 0, n = entry_words_[e], skipped; i < n; ++i) at = get_varint(at, &skipped);
      const size_t bytes = size_t(at - from);
      std::memmove(base + to, from, bytes);
      entry_list_[e] = to;
      to += bytes;
    }
    lists_.resize(to);
    lists_.shrink();
    dead_bytes_ = 0;
  }

  Words words_;
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, uint32_t> ids_;
  size_t vocab_size_;
  uint64_t min_frequency_;
  int64_t floor_;                  // entries below this count are never queued
  std::vector<uint32_t> lengths_;  // current symbols per word
  PairCounts pair_counts_;
  Buffer<Item> queue_;             // a heap under ItemLess
  Buffer<uint64_t> entry_list_;    // per entry: where its list starts in lists_
  Buffer<uint32_t> entry_words_;   // per entry: the words in its list; 0 once merged (the list is dead)
  Buffer<uint8_t> lists_;          // the arena of word lists
  uint64_t dead_bytes_ = 0;        // bytes of lists_ that no entry reads any more
  std::vector<std::pair<uint32_t, uint32_t>> merges_;
  Buffer<uint64_t> formed_left_;   // this step: (other << 32 | word) of pairs (other, token) formed
  Buffer<uint64_t> formed_right_;  // and of pairs (token, other)
  Buffer<uint32_t> words_buffer_;
};

}  // namespace bloombpe
