// Scaled causal softmax with ALiBi added in-kernel, CUDA, fp32 math for every input dtype.
//
// One block per row (b, h, i). Thread t holds elements j = t + k * blockDim.x, k < ELEMS, in
// registers, so the row is read once and written once; loads are coalesced across the block.
// Keys j >= limit = sk - sq + i + 1 are masked: they are never loaded and are written as 0 (the
// reference's finfo.min fill gives exactly 0 there), so a causal square reads half its scores.
// ELEMS <= 16 per thread and blockDim <= 1024 give rows of up to 16384 keys (Megatron's kernel
// stops at 2048/4096); Python falls back to the reference above that. __launch_bounds__(1024, 1) caps the
// registers at 64 a thread, so the widest launch (1024 x 16) fits the SM's 64K registers: without it
// the compiler took 71-80 and that launch failed with "too many resources requested". The minimum of one
// block per SM keeps ptxas from trading registers for occupancy (with the bare bound, the 8-value
// forward took 32 registers and spilled 8 bytes on sm_90). The backward of a 16-value row reads its two
// inputs twice (the dot product, then the output; the second read hits L1/L2) instead of holding 32
// values a thread, which spilled ~60 bytes: `bloomtrain build-kernels --targets ...` shows none spill.
#include "cuda_common.cuh"

namespace bloomkernels::cuda {
namespace {

constexpr int kMaxElems = 16;
constexpr int kMaxThreads = 1024;

template <typename T, int ELEMS>
__global__ void __launch_bounds__(kMaxThreads, 1)
    alibi_softmax_fwd_kernel(const T* __restrict__ scores, const float* __restrict__ slopes, T* __restrict__ probs,
                             int64_t heads, int64_t sq, int64_t sk, float scale) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t i = row % sq;
  const float slope = slopes[(row / sq) % heads];
  const int64_t limit = sk - sq + i + 1;
  const T* s = scores + row * sk;
  T* p = probs + row * sk;
  if (limit <= 0) {  // fully masked (sq > sk only): uniform, as softmax over finfo.min entries
    const T u = from_float<T>(1.f / static_cast<float>(sk));
    for (int64_t j = threadIdx.x; j < sk; j += blockDim.x) p[j] = u;
    return;
  }
  float v[ELEMS];
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < ELEMS; ++k) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    v[k] = j < limit ? to_float(s[j]) * scale + slope * static_cast<float>(j) : -INFINITY;
    mx = fmaxf(mx, v[k]);
  }
  mx = block_reduce<true>(mx, scratch);
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < ELEMS; ++k) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    v[k] = j < limit ? __expf(v[k] - mx) : 0.f;
    sum += v[k];
  }
  const float inv = 1.f / block_reduce<false>(sum, scratch);
#pragma unroll
  for (int k = 0; k < ELEMS; ++k) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    if (j < sk) p[j] = from_float<T>(v[k] * inv);
  }
}

template <typename T, int ELEMS>
__global__ void __launch_bounds__(kMaxThreads, 1)
    alibi_softmax_bwd_kernel(const T* __restrict__ dprobs, const T* __restrict__ probs, T* __restrict__ dscores,
                             int64_t sq, int64_t sk, float scale) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int64_t limit = sk - sq + row % sq + 1;  // <= 0: fully masked row, zero gradient
  const T* y = probs + row * sk;
  const T* dy = dprobs + row * sk;
  T* dx = dscores + row * sk;
  if constexpr (ELEMS <= 8) {  // the row's values stay in registers between the two passes
    float yv[ELEMS], dv[ELEMS];
    float dot = 0.f;
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      const bool live = j < limit;
      yv[k] = live ? to_float(y[j]) : 0.f;
      dv[k] = live ? to_float(dy[j]) : 0.f;
      dot += yv[k] * dv[k];
    }
    dot = block_reduce<false>(dot, scratch);
#pragma unroll
    for (int k = 0; k < ELEMS; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (j < sk) dx[j] = from_float<T>(scale * yv[k] * (dv[k] - dot));
    }
  } else {  // 16 values a thread: read them again for the output (4 loads in flight, no spill)
    float dot = 0.f;
#pragma unroll 4
    for (int k = 0; k < ELEMS; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (j < limit) dot += to_float(y[j]) * to_float(dy[j]);
    }
    dot = block_reduce<false>(dot, scratch);
#pragma unroll 4
    for (int k = 0; k < ELEMS; ++k) {
      const int64_t j = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
      if (j >= sk) continue;
      dx[j] = from_float<T>(j < limit ? scale * to_float(y[j]) * (to_float(dy[j]) - dot) : 0.f);
    }
  }
}

// Smallest block (>= 32 threads) that covers sk with <= 8 values per thread, or 16 at 1024 threads.
void pick_shape(int64_t sk, int* threads, int* elems) {
  int t = 32;
  while (t < kMaxThreads && (sk + t - 1) / t > 8) t <<= 1;
  const int64_t per = (sk + t - 1) / t;
  int e = 1;
  while (e < per) e <<= 1;
  *threads = t;
  *elems = e;
}

#define BLOOM_SOFTMAX_ELEMS(elems, ...)                 \
  switch (elems) {                                      \
    case 1: { constexpr int E = 1; __VA_ARGS__; break; }   \
    case 2: { constexpr int E = 2; __VA_ARGS__; break; }   \
    case 4: { constexpr int E = 4; __VA_ARGS__; break; }   \
    case 8: { constexpr int E = 8; __VA_ARGS__; break; }   \
    case 16: { constexpr int E = 16; __VA_ARGS__; break; } \
    default: return static_cast<int>(cudaErrorInvalidValue); \
  }

}  // namespace

int64_t alibi_softmax_max_keys() { return static_cast<int64_t>(kMaxElems) * kMaxThreads; }

int alibi_softmax_forward(DType dtype, const void* scores, const float* slopes, void* probs, int64_t batch,
                          int64_t heads, int64_t sq, int64_t sk, double scale, void* stream_) {
  const int64_t rows = batch * heads * sq;
  if (rows == 0 || sk == 0) return 0;
  if (sk > alibi_softmax_max_keys() || rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  int threads = 0, elems = 0;
  pick_shape(sk, &threads, &elems);
  const auto stream = static_cast<cudaStream_t>(stream_);
  BLOOM_CUDA_DISPATCH(dtype, BLOOM_SOFTMAX_ELEMS(elems, alibi_softmax_fwd_kernel<T, E>
                      <<<static_cast<unsigned>(rows), threads, 0, stream>>>(
                          static_cast<const T*>(scores), slopes, static_cast<T*>(probs), heads, sq, sk,
                          static_cast<float>(scale))));
  return static_cast<int>(cudaGetLastError());
}

int alibi_softmax_backward(DType dtype, const void* dprobs, const void* probs, void* dscores, int64_t batch,
                           int64_t heads, int64_t sq, int64_t sk, double scale, void* stream_) {
  const int64_t rows = batch * heads * sq;
  if (rows == 0 || sk == 0) return 0;
  if (sk > alibi_softmax_max_keys() || rows > 0x7fffffff) return static_cast<int>(cudaErrorInvalidValue);
  int threads = 0, elems = 0;
  pick_shape(sk, &threads, &elems);
  const auto stream = static_cast<cudaStream_t>(stream_);
  BLOOM_CUDA_DISPATCH(dtype, BLOOM_SOFTMAX_ELEMS(elems, alibi_softmax_bwd_kernel<T, E>
                      <<<static_cast<unsigned>(rows), threads, 0, stream>>>(
                          static_cast<const T*>(dprobs), static_cast<const T*>(probs), static_cast<T*>(dscores),
                          sq, sk, static_cast<float>(scale))));
  return static_cast<int>(cudaGetLastError());
}

}  // namespace bloomkernels::cuda
