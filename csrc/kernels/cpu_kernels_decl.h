// The CPU kernel declarations for one ISA namespace, bloomkernels::BLOOM_CPU_DECL_NS. No include guard on
// purpose: cpu_kernels.h includes it once per namespace (cpu, and cpu_avx2 on x86-64).

namespace bloomkernels::BLOOM_CPU_DECL_NS {

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

}  // namespace bloomkernels::BLOOM_CPU_DECL_NS
