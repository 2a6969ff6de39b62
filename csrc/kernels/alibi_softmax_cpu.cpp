// Scaled causal softmax with the ALiBi bias added inside the kernel, on the CPU.
//
// Row (b, h, i) of scores [batch, heads, sq, sk] computes, in fp32 (fp64 for fp64 inputs),
//   x_j = scale * s_j + slope_h * j   for the visible keys j < limit = sk - sq + i + 1,
// then softmax over those; masked keys get exactly 0, as the reference's finfo.min fill does.
// Masked keys are never read, so a full causal square reads and exps only its lower triangle.
// A thread-private fp32 buffer of sk values keeps x_j between the max, exp-sum and scale passes.
// Rows are scheduled dynamically: causal rows differ in length by up to sk.
#include <omp.h>

#include <limits>
#include <vector>

#include "cpu_kernels.h"

// The baseline build; cpu_avx2.cpp includes this file again as bloomkernels::cpu_avx2.
#ifndef BLOOM_CPU_NS
#define BLOOM_CPU_NS cpu
#endif

namespace bloomkernels::BLOOM_CPU_NS {

template <typename T>
void alibi_softmax_forward(const T* scores, const acc_t<T>* slopes, T* probs, int64_t batch, int64_t heads,
                           int64_t sq, int64_t sk, double scale) {
  using A = acc_t<T>;
  const int64_t rows = batch * heads * sq;
  const A sc = static_cast<A>(scale);
#pragma omp parallel if (rows * sk > kParallelGrain && rows > 1)
  {
    std::vector<A> buf(static_cast<size_t>(sk));
    A* b = buf.data();
#pragma omp for schedule(dynamic, 8)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t i = r % sq;
      const A slope = slopes[(r / sq) % heads];
      const T* s = scores + r * sk;
      T* p = probs + r * sk;
      const int64_t limit = causal_limit(i, sq, sk);
      if (limit <= 0) {  // fully masked (only when sq > sk): uniform, like softmax over finfo.min
        const T u = static_cast<T>(A(1) / static_cast<A>(sk));
        for (int64_t j = 0; j < sk; ++j) p[j] = u;
        continue;
      }
      A mx = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : mx)
      for (int64_t j = 0; j < limit; ++j) {
        const A v = static_cast<A>(s[j]) * sc + slope * static_cast<A>(j);
        b[j] = v;
        mx = v > mx ? v : mx;
      }
      A sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < limit; ++j) {
        const A e = fast_exp(b[j] - mx);
        b[j] = e;
        sum += e;
      }
      const A inv = A(1) / sum;
#pragma omp simd
      for (int64_t j = 0; j < limit; ++j) p[j] = static_cast<T>(b[j] * inv);
      for (int64_t j = limit; j < sk; ++j) p[j] = static_cast<T>(0);
    }
  }
}

template <typename T>
void alibi_softmax_backward(const T* dprobs, const T* probs, T* dscores, int64_t batch, int64_t heads, int64_t sq,
                            int64_t sk, double scale) {
  using A = acc_t<T>;
  const int64_t rows = batch * heads * sq;
  const A sc = static_cast<A>(scale);
#pragma omp parallel for schedule(dynamic, 8) if (rows * sk > kParallelGrain && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* y = probs + r * sk;
    const T* dy = dprobs + r * sk;
    T* dx = dscores + r * sk;
    int64_t limit = causal_limit(r % sq, sq, sk);
    limit = limit < 0 ? 0 : limit;  // fully masked rows: the fill blocks all gradient
    A dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < limit; ++j) dot += static_cast<A>(y[j]) * static_cast<A>(dy[j]);
#pragma omp simd
    for (int64_t j = 0; j < limit; ++j)
      dx[j] = static_cast<T>(sc * static_cast<A>(y[j]) * (static_cast<A>(dy[j]) - dot));
    for (int64_t j = limit; j < sk; ++j) dx[j] = static_cast<T>(0);
  }
}

#define BLOOM_INSTANTIATE_SOFTMAX(T)                                                                          \
  template void alibi_softmax_forward<T>(const T*, const acc_t<T>*, T*, int64_t, int64_t, int64_t, int64_t, \
                                         double);                                                             \
  template void alibi_softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t, double);
BLOOM_CPU_INSTANTIATE(BLOOM_INSTANTIATE_SOFTMAX)

}  // namespace bloomkernels::BLOOM_CPU_NS
