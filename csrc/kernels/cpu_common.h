// Shared helpers for the CPU kernels: accumulation types, a vectorizable exp, and the
// explicit-instantiation list. They live in namespace bloomkernels, above both ISA builds of the
// kernels (bloomkernels::cpu, baseline; bloomkernels::cpu_avx2, see cpu_avx2.cpp). The CPU kernels work on raw pointers (no torch headers beyond
// c10's scalar types) so each translation unit compiles in seconds; bindings.cpp owns the
// tensor checks and the dtype dispatch.
//
// Why our own exp: libm's expf is not vectorized without -ffast-math, and we may not use
// -march=native (the build cache can move between machines). fast_exp below uses only +, *, and
// integer bit tricks, so `#pragma omp simd` loops vectorize with the baseline ISA (SSE2 on x86-64,
// NEON on aarch64). Its error is ~2 ulp in fp32, far inside the 1e-6 test tolerance.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace bloomkernels {

// fp32 statistics for fp32/bf16/fp16 inputs; fp64 only for fp64 inputs (gradcheck).
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Rows x cols below this many elements run on one thread: spawning the pool costs more.
constexpr int64_t kParallelGrain = 32768;

#pragma omp declare simd notinbranch
inline float fast_exp(float x) {
  // Cephes expf: exp(x) = 2^n * exp(r), r = x - n ln2 in [-ln2/2, ln2/2], degree-6 polynomial.
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  float t = x * 1.44269504088896341f + magic;
  float n = t - magic;
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t e = static_cast<int32_t>(n) + 127;
  e = e << 23;
  float scale;
  std::memcpy(&scale, &e, sizeof(scale));
  return p * scale;
}

// fp64 (gradcheck only): libm, clamped like the fp32 path so exp never overflows to inf.
inline double fast_exp(double x) { return std::exp(x < -700.0 ? -700.0 : (x > 700.0 ? 700.0 : x)); }


}  // namespace bloomkernels

// Instantiate a kernel template for every dtype the CPU path accepts.
#define BLOOM_CPU_INSTANTIATE(MACRO) \
  MACRO(float)                       \
  MACRO(double)                      \
  MACRO(c10::BFloat16)               \
  MACRO(c10::Half)
