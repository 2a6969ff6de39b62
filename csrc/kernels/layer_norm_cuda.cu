// Fused LayerNorm on CUDA, fp32 statistics for fp32/fp16/bf16 inputs.
//
// Forward: one block per row. Two-pass statistics (mean, then the sum of squared deviations) and
// the output pass read the row three times; the re-reads of a row (<= 28 KB for h = 14336 bf16)
// hit L1/L2, so DRAM traffic stays one read of x and one write of y. Rows whose length is a
// multiple of 8 (16-byte aligned) are read and written as 16-byte vectors.
// Backward: dx per row in a row kernel (two block reductions); dgamma/dbeta in a column kernel
// that writes per-row-chunk partial sums, reduced by a second tiny kernel (deterministic).
#include "cuda_common.cuh"

namespace bloomkernels::cuda {
namespace {

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

template <typename T, int VEC>
__global__ void layer_norm_fwd_kernel(const T* __restrict__ x, const float* __restrict__ gamma,
                                      const float* __restrict__ beta, T* __restrict__ y, float* __restrict__ mean,
                                      float* __restrict__ rstd, int64_t cols, float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  T* yr = y + row * cols;
  const int64_t nvec = cols / VEC;
  using V = Vec<T, VEC>;
  const V* xv = reinterpret_cast<const V*>(xr);

  float s = 0.f;
  for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) {
    const V v = xv[k];
#pragma unroll
    for (int u = 0; u < VEC; ++u) s += to_float(v.v[u]);
  }
  const float m = block_reduce<false>(s, scratch) / static_cast<float>(cols);
  float sq = 0.f;
  for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) {
    const V v = xv[k];
#pragma unroll
    for (int u = 0; u < VEC; ++u) {
      const float d = to_float(v.v[u]) - m;
      sq += d * d;
    }
  }
  const float rs = rsqrtf(block_reduce<false>(sq, scratch) / static_cast<float>(cols) + eps);
  V* yv = reinterpret_cast<V*>(yr);
  for (int64_t k = threadIdx.x; k < nvec; k += blockDim.x) {
    const V v = xv[k];
    V o;
#pragma unroll
    for (int u = 0; u < VEC; ++u) {
      const int64_t c = k * VEC + u;
      o.v[u] = from_float<T>((to_float(v.v[u]) - m) * rs * gamma[c] + beta[c]);
    }
    yv[k] = o;
  }
  if (threadIdx.x == 0) {
    mean[row] = m;
    rstd[row] = rs;
  }
}

template <typename T>
__global__ void layer_norm_bwd_dx_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                         const float* __restrict__ gamma, const float* __restrict__ mean,
                                         const float* __restrict__ rstd, T* __restrict__ dx, int64_t cols) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* xr = x + row * cols;
  const T* dyr = dy + row * cols;
  const float m = mean[row], rs = rstd[row];
  float sg = 0.f, sgx = 0.f;
  // g = dy * gamma is rounded once (__fmul_rn: never contracted into an FMA) and the same value is used in
  // both passes, so dy * gamma - mean(g) is exactly 0 where a row is constant (h = 1): an FMA there left the
  // product's rounding error times rstd (up to 1/sqrt(eps) = 316) in dx.
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float g = __fmul_rn(to_float(dyr[c]), gamma[c]);
    sg += g;
    sgx += g * (to_float(xr[c]) - m) * rs;
  }
  const float inv = 1.f / static_cast<float>(cols);
  const float mg = block_reduce<false>(sg, scratch) * inv;
  const float mgx = block_reduce<false>(sgx, scratch) * inv;
  T* dxr = dx + row * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float xhat = (to_float(xr[c]) - m) * rs;
    dxr[c] = from_float<T>(rs * (__fmul_rn(to_float(dyr[c]), gamma[c]) - mg - xhat * mgx));
  }
}

// Block (32, 8): x = column in a 32-wide tile, y = row lane within the chunk. Writes
// partial_g/partial_b [chunks, cols].
template <typename T>
__global__ void layer_norm_bwd_params_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                             const float* __restrict__ mean, const float* __restrict__ rstd,
                                             float* __restrict__ partial_g, float* __restrict__ partial_b,
                                             int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  __shared__ float sg[8][33], sb[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float g = 0.f, b = 0.f;
  if (c < cols) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float d = to_float(dy[r * cols + c]);
      g += d * (to_float(x[r * cols + c]) - mean[r]) * rstd[r];
      b += d;
    }
  }
  sg[threadIdx.y][threadIdx.x] = g;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
#pragma unroll
    for (int k = 1; k < 8; ++k) {
      g += sg[k][threadIdx.x];
      b += sb[k][threadIdx.x];
    }
    partial_g[static_cast<int64_t>(blockIdx.y) * cols + c] = g;
    partial_b[static_cast<int64_t>(blockIdx.y) * cols + c] = b;
  }
}

__global__ void reduce_partials_kernel(const float* __restrict__ partial, int64_t chunks, int64_t cols,
                                       float* __restrict__ out) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  float s = 0.f;
  for (int64_t k = 0; k < chunks; ++k) s += partial[k * cols + c];
  out[c] = s;
}

int row_threads(int64_t work) {
  int t = 32;
  while (t < 1024 && t < work) t <<= 1;
  return t > 512 ? 512 : t;
}

template <typename T>
int launch_fwd(const T* x, const float* g, const float* b, T* y, float* mean, float* rstd, int64_t rows,
               int64_t cols, float eps, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const bool vec = cols % kVec == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(y) % 16 == 0;
  const dim3 grid(static_cast<unsigned>(rows));
  if (vec) {
    layer_norm_fwd_kernel<T, kVec><<<grid, row_threads(cols / kVec), 0, stream>>>(x, g, b, y, mean, rstd, cols, eps);
  } else {
    layer_norm_fwd_kernel<T, 1><<<grid, row_threads(cols), 0, stream>>>(x, g, b, y, mean, rstd, cols, eps);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int reduce_partials(const float* partial, int64_t chunks, int64_t cols, float* out, cudaStream_t stream) {
  reduce_partials_kernel<<<static_cast<unsigned>((cols + 255) / 256), 256, 0, stream>>>(partial, chunks, cols, out);
  return static_cast<int>(cudaGetLastError());
}

size_t column_reduce_workspace(int64_t rows, int64_t cols) {
  return static_cast<size_t>(2 * column_chunks(rows) * cols);
}

const char* error_string(int code) { return cudaGetErrorString(static_cast<cudaError_t>(code)); }

int layer_norm_forward(DType dtype, const void* x, const float* gamma, const float* beta, void* y, float* mean,
                       float* rstd, int64_t rows, int64_t cols, double eps, void* stream) {
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  BLOOM_CUDA_DISPATCH(dtype, return launch_fwd<T>(static_cast<const T*>(x), gamma, beta, static_cast<T*>(y), mean,
                                                  rstd, rows, cols, static_cast<float>(eps),
                                                  static_cast<cudaStream_t>(stream)));
  return 0;
}

int layer_norm_backward(DType dtype, const void* dy, const void* x, const float* gamma, const float* mean,
                        const float* rstd, void* dx, float* dgamma, float* dbeta, float* workspace, int64_t rows,
                        int64_t cols, void* stream_) {
  if (rows == 0 || cols == 0) return 0;
  if (rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  const auto stream = static_cast<cudaStream_t>(stream_);
  const int64_t chunks = column_chunks(rows);
  const int64_t per_chunk = (rows + chunks - 1) / chunks;
  float* partial_g = workspace;
  float* partial_b = workspace + chunks * cols;
  BLOOM_CUDA_DISPATCH(dtype, {
    const T* dyt = static_cast<const T*>(dy);
    const T* xt = static_cast<const T*>(x);
    layer_norm_bwd_dx_kernel<T><<<static_cast<unsigned>(rows), row_threads(cols), 0, stream>>>(
        dyt, xt, gamma, mean, rstd, static_cast<T*>(dx), cols);
    const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(chunks));
    layer_norm_bwd_params_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(dyt, xt, mean, rstd, partial_g, partial_b,
                                                                       rows, cols, per_chunk);
  });
  int err = static_cast<int>(cudaGetLastError());
  if (err != 0) return err;
  err = reduce_partials(partial_g, chunks, cols, dgamma, stream);
  if (err != 0) return err;
  return reduce_partials(partial_b, chunks, cols, dbeta, stream);
}

}  // namespace bloomkernels::cuda
