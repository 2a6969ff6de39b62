// Fused bias + tanh-GeLU on CUDA, fp32 math for every input dtype.
//
// Forward: a grid-stride elementwise kernel, 16-byte vectors when the row length allows.
// Backward: (32, 8) tiles over [row chunk, 32 columns] write dx and per-chunk column sums of dx
// (fp32, before rounding), then reduce_partials sums the chunks into dbias: one read of x and dy,
// one write of dx, deterministic. Same stable formulation as the CPU kernel:
//   e = exp(2z), d = 1/(e+1):  0.5 (1 + tanh z) = e d,  1 - tanh^2 z = 4 e d^2.
#include "cuda_common.cuh"

namespace bloomkernels::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kCubic = 0.044715f;

__device__ __forceinline__ void gelu_parts(float u, float* ed, float* d) {
  float z2 = 2.f * kSqrt2OverPi * u * (1.f + kCubic * u * u);
  z2 = fminf(fmaxf(z2, -80.f), 80.f);  // keeps e finite so e * d never becomes inf * 0
  const float e = __expf(z2);
  *d = 1.f / (e + 1.f);
  *ed = e * *d;
}

__device__ __forceinline__ float gelu(float u) {
  float ed, d;
  gelu_parts(u, &ed, &d);
  return u * ed;
}

__device__ __forceinline__ float gelu_grad(float u) {
  float ed, d;
  gelu_parts(u, &ed, &d);
  return ed + 0.5f * u * (4.f * ed * d) * kSqrt2OverPi * (1.f + 3.f * kCubic * u * u);
}

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
  T v[VEC];
};

template <typename T, int VEC>
__global__ void bias_gelu_fwd_kernel(const T* __restrict__ x, const float* __restrict__ bias, T* __restrict__ y,
                                     int64_t nvec, int64_t cols) {
  using V = Vec<T, VEC>;
  const V* xv = reinterpret_cast<const V*>(x);
  V* yv = reinterpret_cast<V*>(y);
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < nvec;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const V in = xv[k];
    V out;
    const int64_t c0 = (k * VEC) % cols;  // VEC divides cols, so a vector never wraps a row
#pragma unroll
    for (int u = 0; u < VEC; ++u) out.v[u] = from_float<T>(gelu(to_float(in.v[u]) + bias[c0 + u]));
    yv[k] = out;
  }
}

template <typename T>
__global__ void bias_gelu_bwd_kernel(const T* __restrict__ dy, const T* __restrict__ x,
                                     const float* __restrict__ bias, T* __restrict__ dx, float* __restrict__ partial,
                                     int64_t rows, int64_t cols, int64_t rows_per_chunk) {
  __shared__ float sb[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float acc = 0.f;
  if (c < cols) {
    const float b = bias[c];
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const int64_t idx = r * cols + c;
      const float g = to_float(dy[idx]) * gelu_grad(to_float(x[idx]) + b);
      dx[idx] = from_float<T>(g);
      acc += g;
    }
  }
  sb[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
#pragma unroll
    for (int k = 1; k < 8; ++k) acc += sb[k][threadIdx.x];
    partial[static_cast<int64_t>(blockIdx.y) * cols + c] = acc;
  }
}

template <typename T>
int launch_fwd(const T* x, const float* bias, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(T);
  const int64_t n = rows * cols;
  const bool vec = cols % kVec == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(y) % 16 == 0;
  if (vec) {
    const int64_t nvec = n / kVec;
    bias_gelu_fwd_kernel<T, kVec><<<grid_limit((nvec + 255) / 256), 256, 0, stream>>>(x, bias, y, nvec, cols);
  } else {
    bias_gelu_fwd_kernel<T, 1><<<grid_limit((n + 255) / 256), 256, 0, stream>>>(x, bias, y, n, cols);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int bias_gelu_forward(DType dtype, const void* x, const float* bias, void* y, int64_t rows, int64_t cols,
                      void* stream) {
  if (rows == 0 || cols == 0) return 0;
  BLOOM_CUDA_DISPATCH(dtype, return launch_fwd<T>(static_cast<const T*>(x), bias, static_cast<T*>(y), rows, cols,
                                                  static_cast<cudaStream_t>(stream)));
  return 0;
}

int bias_gelu_backward(DType dtype, const void* dy, const void* x, const float* bias, void* dx, float* dbias,
                       float* workspace, int64_t rows, int64_t cols, void* stream_) {
  if (rows == 0 || cols == 0) return 0;
  const auto stream = static_cast<cudaStream_t>(stream_);
  const int64_t chunks = column_chunks(rows);
  const int64_t per_chunk = (rows + chunks - 1) / chunks;
  const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(chunks));
  BLOOM_CUDA_DISPATCH(dtype, bias_gelu_bwd_kernel<T><<<grid, dim3(32, 8), 0, stream>>>(
                                 static_cast<const T*>(dy), static_cast<const T*>(x), bias, static_cast<T*>(dx),
                                 workspace, rows, cols, per_chunk));
  const int err = static_cast<int>(cudaGetLastError());
  if (err != 0) return err;
  return reduce_partials(workspace, chunks, cols, dbias, stream);
}

}  // namespace bloomkernels::cuda
