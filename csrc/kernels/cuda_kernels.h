// CUDA launcher entry points. This header has no CUDA or torch includes, so both nvcc (the .cu
// files, compiled standalone in CI) and the host compiler (bindings.cpp) read it. Pointers are
// device pointers to contiguous row-major data; `stream` is a cudaStream_t passed as void*.
// Each launcher returns a cudaError_t as int (0 = success); error_string() names it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace bloomkernels::cuda {

enum class DType : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Launchers whose backward reduces over rows (dgamma/dbeta, dbias) need a float workspace of
// column_reduce_workspace(rows, cols) elements: per-row-chunk partial sums, reduced in a second
// kernel so the result is deterministic (no atomics).
size_t column_reduce_workspace(int64_t rows, int64_t cols);

// Longest key row alibi_softmax_* handle (values are kept in registers, <= 16 per thread).
int64_t alibi_softmax_max_keys();

const char* error_string(int code);

int layer_norm_forward(DType dtype, const void* x, const float* gamma, const float* beta, void* y, float* mean,
                       float* rstd, int64_t rows, int64_t cols, double eps, void* stream);
int layer_norm_backward(DType dtype, const void* dy, const void* x, const float* gamma, const float* mean,
                        const float* rstd, void* dx, float* dgamma, float* dbeta, float* workspace, int64_t rows,
                        int64_t cols, void* stream);

int bias_gelu_forward(DType dtype, const void* x, const float* bias, void* y, int64_t rows, int64_t cols,
                      void* stream);
int bias_gelu_backward(DType dtype, const void* dy, const void* x, const float* bias, void* dx, float* dbias,
                       float* workspace, int64_t rows, int64_t cols, void* stream);

int alibi_softmax_forward(DType dtype, const void* scores, const float* slopes, void* probs, int64_t batch,
                          int64_t heads, int64_t sq, int64_t sk, double scale, void* stream);
int alibi_softmax_backward(DType dtype, const void* dprobs, const void* probs, void* dscores, int64_t batch,
                           int64_t heads, int64_t sq, int64_t sk, double scale, void* stream);

}  // namespace bloomkernels::cuda
