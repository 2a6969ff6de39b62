// CPU kernel entry points (raw pointers, row-major contiguous). Implemented in *_cpu.cpp and
// instantiated for float, double, c10::BFloat16 and c10::Half; `A` is acc_t<T> (fp32, or fp64
// for double inputs). "rows" is the product of all leading dims, "cols" the last dim.
#pragma once

#include "cpu_common.h"

namespace bloomkernels::cpu {

// y = (x - mean) * rstd * gamma + beta per row; mean/rstd [rows] saved for the backward.
template <typename T>
void layer_norm_forward(const T* x, const acc_t<T>* gamma, const acc_t<T>* beta, T* y, acc_t<T>* mean,
                        acc_t<T>* rstd, int64_t rows, int64_t cols, double eps);

// dx [rows, cols]; dgamma, dbeta [cols] (accumulated in A over all rows).
template <typename T>
void layer_norm_backward(const T* dy, const T* x, const acc_t<T>* gamma, const acc_t<T>* mean,
                         const acc_t<T>* rstd, T* dx, acc_t<T>* dgamma, acc_t<T>* dbeta, int64_t rows,
                         int64_t cols);

// y = tanh-GeLU(x + bias), bias [cols] broadcast over rows.
template <typename T>
void bias_gelu_forward(const T* x, const acc_t<T>* bias, T* y, int64_t rows, int64_t cols);

// dx = dy * GeLU'(x + bias); dbias [cols] = sum over rows of dx (in A, before rounding dx).
template <typename T>
void bias_gelu_backward(const T* dy, const T* x, const acc_t<T>* bias, T* dx, acc_t<T>* dbias, int64_t rows,
                        int64_t cols);

// scores/probs [batch, heads, sq, sk]; slopes [heads]. Row i of a head sees keys j <= sk - sq + i.
template <typename T>
void alibi_softmax_forward(const T* scores, const acc_t<T>* slopes, T* probs, int64_t batch, int64_t heads,
                           int64_t sq, int64_t sk, double scale);

// dscores = scale * y * (dy - sum_j y_j dy_j) on visible keys, 0 on masked ones.
template <typename T>
void alibi_softmax_backward(const T* dprobs, const T* probs, T* dscores, int64_t batch, int64_t heads, int64_t sq,
                            int64_t sk, double scale);

// Number of visible keys of query row i (may be <= 0 when sq > sk: the reference then attends
// uniformly over its finfo.min entries and passes no gradient).
inline int64_t causal_limit(int64_t i, int64_t sq, int64_t sk) { return sk - sq + i + 1; }

}  // namespace bloomkernels::cpu
