// BLOOM's encoder: the token ids Hugging Face tokenizers gives a text with BLOOM's configuration (no
// normalizer; Split(BLOOM's pattern, Isolated) then ByteLevel(add_prefix_space=False, use_regex=False); BPE
// without dropout, prefix or suffix; no special tokens added), for bloomdata/tokenizer/encoder.py, which
// checks a tokenizer.json is of that configuration before handing its tables here.
//
// Steps, as HF's Tokenizer::encode takes them:
// 1. Added tokens are cut out of the text first: those matched on the raw text (normalized=false), then, in
//    the text between them, those matched on the normalized text (normalized=true; with no normalizer it is
//    the same text). Each pass takes the leftmost match, the longest there (HF's Aho-Corasick, LeftmostLongest).
// 2. The text between added tokens is split into pieces (split.h, BLOOM's pattern).
// 3. Each piece's UTF-8 bytes are merged (merge_word.h) and its ids cached (word_cache.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "merge_word.h"
#include "split.h"
#include "word_cache.h"

namespace bloombpe {

struct AddedToken {
  std::string content;  // UTF-8
  uint32_t id;
  bool normalized;  // matched in the second pass
};

struct EncoderTables {
  std::vector<int32_t> byte_ids;       // 256: the token of each byte, -1 if the vocabulary lacks it
  std::vector<uint32_t> merges;        // (left, right, new id) triples in rank order
  std::vector<uint32_t> excluded;      // the split's excluded code points (split.py)
  std::vector<AddedToken> added;
  bool ignore_merges = false;          // a piece that is a token is that token, unmerged
  std::vector<std::pair<std::string, uint32_t>> vocab;  // with ignore_merges: token bytes -> id
};

class Encoder {
 public:
  Encoder(const EncoderTables& t, size_t cache_words)
      : merges_(t.merges.data(), t.merges.size() / 3), split_(t.excluded), cache_(cache_words),
        ignore_merges_(t.ignore_merges), vocab_(t.vocab.begin(), t.vocab.end()) {
    for (size_t b = 0; b < 256; ++b) byte_ids_[b] = t.byte_ids.at(b);
    for (const AddedToken& a : t.added) {
      if (a.content.empty()) continue;  // matches nothing
      passes_[a.normalized ? 1 : 0].add(a);
    }
  }

  // Appends the ids of the UTF-8 text [text, text + n) to `out`.
  void encode(const char* text, size_t n, std::vector<uint32_t>* out) { cut(text, n, 0, out); }

  const WordCache& cache() const { return cache_; }
  size_t memory() const { return merges_.memory() + cache_.memory(); }

 private:
  // Added tokens of one pass: candidates by first byte, longest first.
  struct Pass {
    bool first[256] = {};
    std::vector<AddedToken> tokens;  // sorted by length, longest first
    void add(const AddedToken& a) {
      first[static_cast<unsigned char>(a.content[0])] = true;
      tokens.push_back(a);
      std::stable_sort(tokens.begin(), tokens.end(),
                       [](const AddedToken& x, const AddedToken& y) { return x.content.size() > y.content.size(); });
    }
    // The longest token at s[i..n): its index, or -1.
    int match(const char* s, size_t i, size_t n) const {
      if (!first[static_cast<unsigned char>(s[i])]) return -1;
      for (size_t k = 0; k < tokens.size(); ++k) {
        const std::string& c = tokens[k].content;
        if (c.size() <= n - i && std::memcmp(s + i, c.data(), c.size()) == 0) return int(k);
      }
      return -1;
    }
  };

  // Pass `pass` over [s, s + n): added tokens out, the text between them to the next pass (or the model).
  void cut(const char* s, size_t n, int pass, std::vector<uint32_t>* out) {
    if (pass == 2) return pieces(s, n, out);
    const Pass& p = passes_[pass];
    if (p.tokens.empty()) return cut(s, n, pass + 1, out);
    size_t start = 0;
    for (size_t i = 0; i < n;) {
      const int k = p.match(s, i, n);
      if (k < 0) {
        ++i;
        continue;
      }
      if (i > start) cut(s + start, i - start, pass + 1, out);
      out->push_back(p.tokens[size_t(k)].id);
      i += p.tokens[size_t(k)].content.size();
      start = i;
    }
    if (n > start) cut(s + start, n - start, pass + 1, out);
  }

  void pieces(const char* s, size_t n, std::vector<uint32_t>* out) {
    split_pieces(s, n, split_, [&](size_t start, size_t length) { word(s + start, length, out); });
  }

  void word(const char* p, size_t n, std::vector<uint32_t>* out) {
    if (n == 1) {  // one byte: its token (or nothing), as merging or a whole-token look-up gives
      const int32_t id = byte_ids_[static_cast<unsigned char>(*p)];
      if (id >= 0) out->push_back(uint32_t(id));
      return;
    }
    const uint64_t h = hash_bytes(p, n);
    size_t count = 0;
    if (const uint32_t* ids = cache_.find(p, n, h, &count)) {
      out->insert(out->end(), ids, ids + count);
      return;
    }
    const size_t before = out->size();
    auto whole = ignore_merges_ ? vocab_.find(std::string(p, n)) : vocab_.end();
    if (whole != vocab_.end()) {
      out->push_back(whole->second);
    } else {
      merger_.merge(reinterpret_cast<const unsigned char*>(p), n, byte_ids_, merges_, out);
    }
    cache_.insert(p, n, h, out->data() + before, out->size() - before);
  }

  int32_t byte_ids_[256];
  MergeTable merges_;
  Excluded split_;
  WordCache cache_;
  WordMerger merger_;
  Pass passes_[2];
  bool ignore_merges_;
  std::unordered_map<std::string, uint32_t> vocab_;
};

}  // namespace bloombpe
