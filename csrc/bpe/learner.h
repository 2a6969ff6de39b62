// The merge loop of Hugging Face's BpeTrainer over word counts, on compact arrays.
//
// The algorithm, its order of merges and its one arbitrary choice are documented in
// bloomdata/tokenizer/merges.py (the Python reference of this file; the tests compare both with HF's
// trainer). Memory, for W distinct words of S symbols in all and P distinct pairs:
//   - the words: S uint32 symbols, merged in place (a word only shrinks), W uint64 offsets, W uint32
//     lengths, W uint64 counts (the caller's arrays);
//   - the pairs: an open-addressing table (uint64 key = left << 32 | right -> uint32 pair index) at most
//     half full, and per pair an int64 count: ~36 bytes per pair;
//   - the queue: 24 bytes per entry and 12 for its word list's place; the lists are uint32 word numbers in
//     an append-only arena of blocks (no reallocation doubles it): the initial lists hold at most S numbers,
//     and each merge in a word adds at most two;
//   - per merge step, 8 bytes per pair it forms in a word (the new token is one side of every pair formed,
//     so the other side and the word fit a uint64).
//     An entry whose count is below max(min_frequency, 1) is never queued: it could only pop once every
//     count is that low, where HF's loop ends (bloomdata/tokenizer/merges.py), so rare pairs cost no list.
// So memory follows the distinct words, not the text they came from.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <queue>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace bloombpe {

inline uint64_t pair_key(uint32_t left, uint32_t right) { return (uint64_t(left) << 32) | right; }

// uint64 pair key -> dense pair index (insertion order). Keys are never removed.
class PairTable {
 public:
  explicit PairTable(size_t expected = 1024) { rehash(std::max<size_t>(64, expected * 2)); }

  // The index of `key`, inserting it as the next index when absent.
  uint32_t index(uint64_t key) {
    size_t slot = find_slot(key);
    if (keys_[slot] == key && used_[slot]) return values_[slot];
    if ((size_ + 1) * 2 > keys_.size()) {
      rehash(keys_.size() * 2);
      slot = find_slot(key);
    }
    used_[slot] = 1;
    keys_[slot] = key;
    values_[slot] = uint32_t(size_);
    return uint32_t(size_++);
  }

  size_t size() const { return size_; }

 private:
  static uint64_t mix(uint64_t x) {  // splitmix64's finalizer: pair keys are far from random
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }

  size_t find_slot(uint64_t key) const {
    const size_t mask = keys_.size() - 1;
    size_t slot = mix(key) & mask;
    while (used_[slot] && keys_[slot] != key) slot = (slot + 1) & mask;
    return slot;
  }

  void rehash(size_t capacity) {
    size_t n = 64;
    while (n < capacity) n <<= 1;
    std::vector<uint64_t> keys(n);
    std::vector<uint32_t> values(n);
    std::vector<uint8_t> used(n, 0);
    keys.swap(keys_);
    values.swap(values_);
    used.swap(used_);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!used[i]) continue;
      const size_t slot = find_slot(keys[i]);
      used_[slot] = 1;
      keys_[slot] = keys[i];
      values_[slot] = values[i];
    }
  }

  std::vector<uint64_t> keys_;
  std::vector<uint32_t> values_;
  std::vector<uint8_t> used_;
  size_t size_ = 0;
};

// A queued entry: HF's `Merge` (count, pair, words). The words live in the arena at [begin, begin + n).
struct Item {
  uint64_t count;  // as HF keeps it: the pair's count when (re)queued, cast to unsigned
  uint64_t key;
  uint32_t entry;
};

// Largest count first, then the smaller pair, then the entry queued first (std::priority_queue pops the
// largest under this "less").
struct ItemLess {
  bool operator()(const Item& x, const Item& y) const {
    if (x.count != y.count) return x.count < y.count;
    if (x.key != y.key) return x.key > y.key;
    return x.entry > y.entry;
  }
};

// Append-only storage of the entries' word lists, in blocks: a list never moves once written.
class Arena {
 public:
  uint32_t* allocate(size_t n) {
    if (blocks_.empty() || used_ + n > size_) {
      size_ = std::max(n, kBlock);
      blocks_.emplace_back(new uint32_t[size_]);
      used_ = 0;
    }
    uint32_t* at = blocks_.back().get() + used_;
    used_ += n;
    return at;
  }

 private:
  static constexpr size_t kBlock = size_t(1) << 20;  // 4 MB
  std::vector<std::unique_ptr<uint32_t[]>> blocks_;
  size_t used_ = 0, size_ = 0;
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
      Item top = queue_.top();
      queue_.pop();
      const uint64_t current = uint64_t(pair_counts_[pairs_.index(top.key)]);
      if (top.count != current) {
        top.count = current;
        queue_.push(top);
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
  // Pair counts and one entry per pair listing the words it occurs in (a two-pass CSR in the arena).
  void count_pairs() {
    std::vector<uint32_t> last;  // per pair: the last word counted, so a word is listed once
    std::vector<uint64_t> listed;
    for (size_t w = 0; w < words_.n; ++w) {
      const uint32_t* s = words_.symbols + words_.offsets[w];
      for (uint32_t i = 0; i + 1 < lengths_[w]; ++i) {
        const uint32_t p = pairs_.index(pair_key(s[i], s[i + 1]));
        if (p == pair_counts_.size()) {
          pair_counts_.push_back(0);
          last.push_back(UINT32_MAX);
          listed.push_back(0);
        }
        pair_counts_[p] += int64_t(words_.counts[w]);
        if (last[p] != w) {
          last[p] = uint32_t(w);
          ++listed[p];
        }
      }
    }
    const size_t pairs = pair_counts_.size();
    std::vector<uint64_t> keys(pairs);
    begin_.assign(pairs, nullptr);
    length_.assign(pairs, 0);
    uint64_t total = 0;
    for (size_t p = 0; p < pairs; ++p) {
      if (pair_counts_[p] >= floor_) total += listed[p];
    }
    uint32_t* list = arena_.allocate(total);
    for (size_t p = 0; p < pairs; ++p) {
      begin_[p] = list;
      if (pair_counts_[p] >= floor_) list += listed[p];
    }
    std::fill(last.begin(), last.end(), UINT32_MAX);
    for (size_t w = 0; w < words_.n; ++w) {
      const uint32_t* s = words_.symbols + words_.offsets[w];
      for (uint32_t i = 0; i + 1 < lengths_[w]; ++i) {
        const uint64_t key = pair_key(s[i], s[i + 1]);
        const uint32_t p = pairs_.index(key);
        keys[p] = key;
        if (pair_counts_[p] >= floor_ && last[p] != w) {
          last[p] = uint32_t(w);
          begin_[p][length_[p]++] = uint32_t(w);
        }
      }
    }
    // entry e == pair index p for the initial entries; queued in pair order (ties cannot occur among them)
    std::vector<Item> items;
    items.reserve(pairs);
    for (size_t p = 0; p < pairs; ++p) {
      if (pair_counts_[p] >= floor_) items.push_back(Item{uint64_t(pair_counts_[p]), keys[p], uint32_t(p)});
    }
    queue_ = std::priority_queue<Item, std::vector<Item>, ItemLess>(ItemLess(), std::move(items));
  }

  // Adds `delta` occurrences of the pair `key` (times the word's count) to its count.
  void add(uint64_t key, int64_t delta) {
    const uint32_t p = pairs_.index(key);
    if (p == pair_counts_.size()) pair_counts_.push_back(0);
    pair_counts_[p] += delta;
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
          add(pair_key(s[out - 1], a), -count);
          add(pair_key(s[out - 1], token), count);
          formed_left_.push_back((uint64_t(s[out - 1]) << 32) | w);
        }
        if (r + 2 < n) {
          add(pair_key(b, s[r + 2]), -count);
          add(pair_key(token, s[r + 2]), count);
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
    formed_left_.clear();
    formed_right_.clear();
    const uint32_t* words = begin_[top.entry];
    for (uint32_t i = 0; i < length_[top.entry]; ++i) merge_word(words[i], a, b, token);
    queue_formed(token);
    for (auto* formed : {&formed_left_, &formed_right_}) {
      if (formed->capacity() > (size_t(1) << 24) && formed->size() < formed->capacity() / 4) {
        std::vector<uint64_t>().swap(*formed);  // one very common pair grew it: give the memory back
      }
    }
  }

  // Queues, in pair order, one entry per pair formed this step with a count at or above the floor, listing
  // the words it was formed in. (token, token) can be noted on both sides: its words are joined.
  void queue_formed(uint32_t token) {
    for (auto* formed : {&formed_left_, &formed_right_}) {
      std::sort(formed->begin(), formed->end());
      formed->erase(std::unique(formed->begin(), formed->end()), formed->end());
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
      const int64_t count = pair_counts_[pairs_.index(key)];
      if (count >= floor_) {
        words_buffer_.clear();
        for (size_t k = i; k < i2; ++k) words_buffer_.push_back(uint32_t(L[k]));
        for (size_t k = j; k < j2; ++k) words_buffer_.push_back(uint32_t(R[k]));
        if (i2 > i && j2 > j) {  // (token, token): a word may be on both sides
          std::sort(words_buffer_.begin(), words_buffer_.end());
          words_buffer_.erase(std::unique(words_buffer_.begin(), words_buffer_.end()), words_buffer_.end());
        }
        uint32_t* list = arena_.allocate(words_buffer_.size());
        std::copy(words_buffer_.begin(), words_buffer_.end(), list);
        queue_.push(Item{uint64_t(count), key, uint32_t(begin_.size())});
        begin_.push_back(list);
        length_.push_back(uint32_t(words_buffer_.size()));
      }
      i = i2;
      j = j2;
    }
  }

  Words words_;
  std::vector<std::string> vocab_;
  std::unordered_map<std::string, uint32_t> ids_;
  size_t vocab_size_;
  uint64_t min_frequency_;
  int64_t floor_;                  // entries below this count are never queued
  std::vector<uint32_t> lengths_;  // current symbols per word
  PairTable pairs_;
  std::vector<int64_t> pair_counts_;  // per pair index
  std::vector<uint32_t*> begin_;      // per entry: its words in the arena
  std::vector<uint32_t> length_;
  Arena arena_;
  std::priority_queue<Item, std::vector<Item>, ItemLess> queue_;
  std::vector<std::pair<uint32_t, uint32_t>> merges_;
  std::vector<uint64_t> formed_left_;   // this step: (other << 32 | word) of pairs (other, token) formed
  std::vector<uint64_t> formed_right_;  // and of pairs (token, other)
  std::vector<uint32_t> words_buffer_;
};

}  // namespace bloombpe
