// Fused bias + tanh-GeLU on the CPU: one read of x, one write of y, math in fp32 (fp64 for fp64
// inputs). BLOOM's formula (Megatron fused_bias_gelu.py):
//   y = 0.5 u (1 + tanh(k u (1 + 0.044715 u^2))),  u = x + bias,  k = sqrt(2/pi)
//   dy/du = 0.5 (1 + t) + 0.5 u (1 - t^2) k (1 + 3 * 0.044715 u^2),  t = tanh(...)
// dbias is summed from dx before rounding, per thread into private [cols] buffers.
#include <omp.h>

#include <vector>

#include "cpu_kernels.h"

// The baseline build; cpu_avx2.cpp includes this file again as bloomkernels::cpu_avx2.
#ifndef BLOOM_CPU_NS
#define BLOOM_CPU_NS cpu
#endif

namespace bloomkernels::BLOOM_CPU_NS {
namespace {

constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kCubic = 0.044715;

// With e = exp(2z), d = 1 / (e + 1): 1 + tanh(z) = 2 e d and 1 - tanh(z)^2 = 4 e d^2. Both avoid the
// cancellation of 1 +/- t when |z| is large (the reference's autograd loses ~1e-5 there in fp32).
// fast_exp clamps its argument, so e is finite and e * d stays in [0, 1].
template <typename A>
inline A exp2z(A u) {
  return fast_exp(A(2 * kSqrt2OverPi) * u * (A(1) + A(kCubic) * u * u));
}

template <typename A>
inline A gelu(A u) {
  const A e = exp2z(u);
  const A d = A(1) / (e + A(1));
  return u * (e * d);  // 0.5 u (1 + tanh) = u e d
}

template <typename A>
inline A gelu_grad(A u) {
  const A e = exp2z(u);
  const A d = A(1) / (e + A(1));
  const A ed = e * d;  // (1 + tanh) / 2
  const A sech2 = A(4) * ed * d;
  return ed + A(0.5) * u * sech2 * A(kSqrt2OverPi) * (A(1) + A(3 * kCubic) * u * u);
}

}  // namespace

template <typename T>
void bias_gelu_forward(const T* x, const acc_t<T>* bias, T* y, int64_t rows, int64_t cols) {
  using A = acc_t<T>;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = static_cast<T>(gelu<A>(static_cast<A>(xr[c]) + bias[c]));
  }
}

template <typename T>
void bias_gelu_backward(const T* dy, const T* x, const acc_t<T>* bias, T* dx, acc_t<T>* dbias, int64_t rows,
                        int64_t cols) {
  using A = acc_t<T>;
  const bool parallel = rows * cols > kParallelGrain && rows > 1;
  const int threads = parallel ? omp_get_max_threads() : 1;
  std::vector<A> partial(static_cast<size_t>(threads) * cols, A(0));
#pragma omp parallel num_threads(threads) if (parallel)
  {
    A* pb = partial.data() + static_cast<size_t>(omp_get_thread_num()) * cols;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * cols;
      const T* dyr = dy + r * cols;
      T* dxr = dx + r * cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const A g = static_cast<A>(dyr[c]) * gelu_grad<A>(static_cast<A>(xr[c]) + bias[c]);
        dxr[c] = static_cast<T>(g);
        pb[c] += g;
      }
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    A s = 0;
    for (int t = 0; t < threads; ++t) s += partial[static_cast<size_t>(t) * cols + c];
    dbias[c] = s;
  }
}

#define BLOOM_INSTANTIATE_GELU(T)                                                            \
  template void bias_gelu_forward<T>(const T*, const acc_t<T>*, T*, int64_t, int64_t);       \
  template void bias_gelu_backward<T>(const T*, const T*, const acc_t<T>*, T*, acc_t<T>*, int64_t, \
                                      int64_t);
BLOOM_CPU_INSTANTIATE(BLOOM_INSTANTIATE_GELU)

}  // namespace bloomkernels::BLOOM_CPU_NS
