// numpy's legacy RandomState stream (MT19937 seeded by init_genrand) and its masked-rejection draws, as
// the shuffle uses them (docs/megatron-data.md, "RNG order").
#pragma once

#include <algorithm>
#include <cstdint>

namespace bloomindices {

// ---------------------------------------------------------------------------------------------
// One block of 624 words: the state update and the tempering, vectorised. Built twice (AVX2 and baseline
// x86-64, picked at load time by CPU): 8 lanes instead of 4 take generation from 0.78 to 0.33 ns per word,
// and the drawer thread of a shuffle spends about a third of its time here.
constexpr int kMTN = 624, kMTM = 397;
__attribute__((target_clones("avx2", "default"))) inline void mt19937_generate(uint32_t* mt_, uint32_t* out_) {
  constexpr int kN = kMTN, kM = kMTM;
  constexpr uint32_t upper = 0x80000000u, lower = 0x7fffffffu, matrix = 0x9908b0dfu;
  int k = 0;
  for (; k < kN - kM; ++k) {
    uint32_t y = (mt_[k] & upper) | (mt_[k + 1] & lower);
    mt_[k] = mt_[k + kM] ^ (y >> 1) ^ (-(y & 1u) & matrix);
  }
  for (; k < kN - 1; ++k) {
    uint32_t y = (mt_[k] & upper) | (mt_[k + 1] & lower);
    mt_[k] = mt_[k + (kM - kN)] ^ (y >> 1) ^ (-(y & 1u) & matrix);
  }
  uint32_t y = (mt_[kN - 1] & upper) | (mt_[0] & lower);
  mt_[kN - 1] = mt_[kM - 1] ^ (y >> 1) ^ (-(y & 1u) & matrix);
  // Temper the whole block at once (vectorised) instead of one word per draw.
  for (int i = 0; i < kN; ++i) {
    uint32_t t = mt_[i];
    t ^= (t >> 11);
    t ^= (t << 7) & 0x9d2c5680u;
    t ^= (t << 15) & 0xefc60000u;
    t ^= (t >> 18);
    out_[i] = t;
  }
}

// MT19937 exactly as numpy's legacy RandomState uses it (numpy/random/src/mt19937).
class MT19937 {
 public:
  explicit MT19937(uint32_t seed) { init_genrand(seed); }

  void init_genrand(uint32_t seed) {
    mt_[0] = seed;
    for (int i = 1; i < kN; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + uint32_t(i);
    pos_ = kN;
  }

  inline uint32_t next32() {
    if (pos_ == kN) generate();
    return out_[pos_++];
  }

  // The tempered words not drawn yet (at least one: refills the block when it is used up); consume(n) draws
  // the first n of them. Lets a caller loop over plain memory instead of calling next32 per word.
  inline const uint32_t* words(int64_t* available) {
    if (pos_ == kN) generate();
    *available = kN - pos_;
    return out_ + pos_;
  }
  inline void consume(int64_t n) { pos_ += int(n); }

  inline uint64_t next64() {
    // numpy: (uint64_t)next32 << 32 | next32, high word drawn first.
    uint64_t hi = next32();
    return (hi << 32) | next32();
  }

  // numpy random_interval(max): uniform in [0, max] by masked rejection.
  inline uint64_t interval(uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    uint64_t value;
    if (max <= 0xffffffffull) {
      while ((value = (next32() & mask)) > max) {
      }
    } else {
      while ((value = (next64() & mask)) > max) {
      }
    }
    return value;
  }

 private:
  static constexpr int kN = kMTN;
  void generate() {
    mt19937_generate(mt_, out_);
    pos_ = 0;
  }
  uint32_t mt_[kN];
  uint32_t out_[kN];
  int pos_;
};

// Draw the j's of positions hi, hi-1, ..., hi-count+1 into js: numpy's masked rejection
// (random_interval) written without a data-dependent branch (a rejected draw is overwritten by the
// next one), since about 28% of the draws are rejected at random and a mispredicted branch costs more
// than the draw itself. The mask is constant while the position stays in one power-of-two range, so it is
// computed once per range, and "v <= hi - t" is tested as "v + t <= hi": the loop-carried chain through
// t is then an add, a compare and an add (the draws themselves do not depend on t).
// J: uint32_t while hi < 2^32 (half the bytes the drawer hands to the swapping thread), else int64_t.
template <typename J>
inline void draw_block(MT19937& rng, int64_t hi, int64_t count, J* js) {
  int64_t t = 0;
  while (t < count) {
    const uint64_t cur = uint64_t(hi - t);
    if (cur > 0xffffffffull) {  // arrays of more than 2^32 elements: numpy's 64-bit draws
      js[t++] = static_cast<J>(rng.interval(cur));
      continue;
    }
    const uint32_t mask = 0xffffffffu >> __builtin_clz(uint32_t(cur) | 1u);
    // positions keep this mask while cur >= (mask >> 1) + 1, i.e. while t < hi - (mask >> 1)
    const int64_t range_end = std::min<int64_t>(count, hi - int64_t(mask >> 1));
    const uint64_t h = uint64_t(hi);
    while (t < range_end) {
      // Each word moves t by at most one, so q words overrun neither the generator's block nor the range:
      // the inner loop has a single counted exit (7 instructions per word).
      int64_t available;
      const uint32_t* w = rng.words(&available);
      const int64_t q = std::min<int64_t>(available, range_end - t);
      for (int64_t i = 0; i < q; ++i) {
        const uint32_t v = w[i] & mask;
        js[t] = v;
        t += (uint64_t(v) + uint64_t(t) <= h);
      }
      rng.consume(q);
    }
  }
}

}  // namespace bloomindices
