// Device helpers shared by the .cu files: dtype conversion (fp32 math for every input dtype),
// warp/block reductions, the dtype switch, and the deterministic column reduction used by the
// backward passes that sum over rows (LayerNorm dgamma/dbeta, bias-GeLU dbias).
// No torch headers: these files compile standalone with `nvcc -c`.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda_kernels.h"

namespace bloomkernels::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum/max for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
// `scratch` is 32 floats of shared memory; the leading barrier makes back-to-back calls safe.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  const float ident = kMax ? -INFINITY : 0.0f;
  float w = lane < warps ? scratch[lane] : ident;
  w = kMax ? warp_max(w) : warp_sum(w);
  return w;
}

// Row chunks for the column reductions: at most 512 chunks of >= 32 rows each, so the partial
// buffer is small and each thread sums a long run of rows before the final pass.
inline int64_t column_chunks(int64_t rows) {
  int64_t chunks = (rows + 31) / 32;
  return chunks < 1 ? 1 : (chunks > 512 ? 512 : chunks);
}

// out[c] = sum_k partial[k * cols + c] over `chunks` rows of partial sums.
int reduce_partials(const float* partial, int64_t chunks, int64_t cols, float* out, cudaStream_t stream);

inline int grid_limit(int64_t blocks) { return static_cast<int>(blocks < 65535 ? blocks : 65535); }

}  // namespace bloomkernels::cuda

// Runs BODY with `T` bound to the CUDA element type of `dtype`.
#define BLOOM_CUDA_DISPATCH(dtype, ...)                                 \
  switch (dtype) {                                                      \
    case ::bloomkernels::cuda::DType::kFloat32: {                       \
      using T = float;                                                  \
      __VA_ARGS__;                                                      \
      break;                                                            \
    }                                                                   \
    case ::bloomkernels::cuda::DType::kFloat16: {                       \
      using T = __half;                                                 \
      __VA_ARGS__;                                                      \
      break;                                                            \
    }                                                                   \
    case ::bloomkernels::cuda::DType::kBFloat16: {                      \
      using T = __nv_bfloat16;                                          \
      __VA_ARGS__;                                                      \
      break;                                                            \
    }                                                                   \
    default:                                                            \
      return static_cast<int>(cudaErrorInvalidValue);                   \
  }
