// Fused LayerNorm on the CPU: one pass for the mean, one for the variance (two-pass is exact to
// fp32 rounding where a single sum/sum-of-squares pass cancels badly for large means), one for
// the output. Rows run in parallel with OpenMP; columns are `omp simd` loops.
//
// Backward: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma. dgamma/dbeta
// are column sums over all rows; each thread sums its rows into a private [cols] buffer and the
// buffers are added at the end, so the result is deterministic for a given thread count.
#include <omp.h>

#include <vector>

#include "cpu_kernels.h"

// The baseline build; cpu_avx2.cpp includes this file again as bloomkernels::cpu_avx2.
#ifndef BLOOM_CPU_NS
#define BLOOM_CPU_NS cpu
#endif

namespace bloomkernels::BLOOM_CPU_NS {

template <typename T>
void layer_norm_forward(const T* x, const acc_t<T>* gamma, const acc_t<T>* beta, T* y, acc_t<T>* mean,
                        acc_t<T>* rstd, int64_t rows, int64_t cols, double eps) {
  using A = acc_t<T>;
  const A inv_cols = A(1) / static_cast<A>(cols);
#pragma omp parallel for schedule(static) if (rows * cols > kParallelGrain && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    A sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < cols; ++c) sum += static_cast<A>(xr[c]);
    const A m = sum * inv_cols;
    A sq = 0;
#pragma omp simd reduction(+ : sq)
    for (int64_t c = 0; c < cols; ++c) {
      const A d = static_cast<A>(xr[c]) - m;
      sq += d * d;
    }
    const A rs = A(1) / std::sqrt(sq * inv_cols + static_cast<A>(eps));
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) yr[c] = static_cast<T>((static_cast<A>(xr[c]) - m) * rs * gamma[c] + beta[c]);
    mean[r] = m;
    rstd[r] = rs;
  }
}

template <typename T>
void layer_norm_backward(const T* dy, const T* x, const acc_t<T>* gamma, const acc_t<T>* mean,
                         const acc_t<T>* rstd, T* dx, acc_t<T>* dgamma, acc_t<T>* dbeta, int64_t rows,
                         int64_t cols) {
  using A = acc_t<T>;
  const A inv_cols = A(1) / static_cast<A>(cols);
  const bool parallel = rows * cols > kParallelGrain && rows > 1;
  const int threads = parallel ? omp_get_max_threads() : 1;
  // Per-thread column partials: [threads][2][cols] (dgamma then dbeta).
  std::vector<A> partial(static_cast<size_t>(threads) * 2 * cols, A(0));
#pragma omp parallel num_threads(threads) if (parallel)
  {
    A* pg = partial.data() + static_cast<size_t>(omp_get_thread_num()) * 2 * cols;
    A* pb = pg + cols;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = x + r * cols;
      const T* dyr = dy + r * cols;
      T* dxr = dx + r * cols;
      const A m = mean[r];
      const A rs = rstd[r];
      A sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
      for (int64_t c = 0; c < cols; ++c) {
        const A d = static_cast<A>(dyr[c]);
        const A xhat = (static_cast<A>(xr[c]) - m) * rs;
        const A g = d * gamma[c];
        sum_g += g;
        sum_gx += g * xhat;
        pg[c] += d * xhat;
        pb[c] += d;
      }
      const A mg = sum_g * inv_cols, mgx = sum_gx * inv_cols;
#pragma omp simd
      for (int64_t c = 0; c < cols; ++c) {
        const A xhat = (static_cast<A>(xr[c]) - m) * rs;
        dxr[c] = static_cast<T>(rs * (static_cast<A>(dyr[c]) * gamma[c] - mg - xhat * mgx));
      }
    }
  }
  for (int64_t c = 0; c < cols; ++c) {
    A g = 0, b = 0;
    for (int t = 0; t < threads; ++t) {
      g += partial[(static_cast<size_t>(t) * 2) * cols + c];
      b += partial[(static_cast<size_t>(t) * 2 + 1) * cols + c];
    }
    dgamma[c] = g;
    dbeta[c] = b;
  }
}

#define BLOOM_INSTANTIATE_LN(T)                                                                               \
  template void layer_norm_forward<T>(const T*, const acc_t<T>*, const acc_t<T>*, T*, acc_t<T>*, acc_t<T>*,   \
                                      int64_t, int64_t, double);                                              \
  template void layer_norm_backward<T>(const T*, const T*, const acc_t<T>*, const acc_t<T>*, const acc_t<T>*, \
                                       T*, acc_t<T>*, acc_t<T>*, int64_t, int64_t);
BLOOM_CPU_INSTANTIATE(BLOOM_INSTANTIATE_LN)

}  // namespace bloomkernels::BLOOM_CPU_NS
