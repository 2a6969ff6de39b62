// BLOOM's pre-tokenization split over UTF-8 text, for the counting pass (bloomdata/tokenizer/split.py holds
// the pattern, the excluded code points and the same split in Python's `re`; the tests check all three agree
// with HF's pre-tokenizer on every BMP code point and on the whole test corpus).
//
// The text breaks at the excluded code points (a set given by the caller: split.py's 39). A piece is an
// optional space and a run of other code points, or a run of excluded ones that stops before a space that
// starts a piece: `" ?[^E]+|(?:(?! [^E])[E])+"`, matched left to right, so the pieces cover the text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace bloombpe {

class Excluded {
 public:
  explicit Excluded(const std::vector<uint32_t>& code_points) : bits_(0x10000 / 64, 0) {
    for (uint32_t c : code_points) {
      if (c < 0x10000) bits_[c >> 6] |= uint64_t(1) << (c & 63);
    }
  }
  bool has(uint32_t c) const { return c < 0x10000 && ((bits_[c >> 6] >> (c & 63)) & 1); }

 private:
  std::vector<uint64_t> bits_;  // the BMP; an astral code point is never excluded
};

// The code point at p (valid UTF-8, as Python hands it out) and its length in bytes.
inline uint32_t utf8_at(const unsigned char* p, size_t* len) {
  const unsigned char b = p[0];
  if (b < 0x80) return *len = 1, b;
  if (b < 0xE0) return *len = 2, (uint32_t(b & 0x1F) << 6) | (p[1] & 0x3F);
  if (b < 0xF0) return *len = 3, (uint32_t(b & 0x0F) << 12) | (uint32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
  return *len = 4, (uint32_t(b & 0x07) << 18) | (uint32_t(p[1] & 0x3F) << 12) | (uint32_t(p[2] & 0x3F) << 6) |
                   (p[3] & 0x3F);
}

// Calls emit(start, length) for every piece of the UTF-8 text [text, text + n), in order.
template <typename Emit>
void split_pieces(const char* text, size_t n, const Excluded& excluded, Emit&& emit) {
  const unsigned char* s = reinterpret_cast<const unsigned char*>(text);
  size_t i = 0, len = 0;
  // A space followed by a code point that is not excluded: where a piece of the first kind starts.
  auto starts_word = [&](size_t at) {
    size_t l = 0;
    return s[at] == ' ' && at + 1 < n && !excluded.has(utf8_at(s + at + 1, &l));
  };
  while (i < n) {
    const size_t start = i;
    const uint32_t c = utf8_at(s + i, &len);
    if (!excluded.has(c) || starts_word(i)) {
      i += len;  // the code point, or the space before one
      while (i < n && !excluded.has(utf8_at(s + i, &len))) i += len;
    } else {
      i += len;
      while (i < n && excluded.has(utf8_at(s + i, &len)) && !starts_word(i)) i += len;
    }
    emit(start, i - start);
  }
}

}  // namespace bloombpe
