// The one Python module of the fused kernels: tensor checks, dtype dispatch and device dispatch.
// CPU tensors go to cpu_kernels.h; CUDA tensors to cuda_kernels.h when the module was built with
// BLOOM_WITH_CUDA (the .cu launchers take raw pointers, so this file is the only torch-aware
// layer). Python (bloomtrain/kernels/*.py) checks shapes and dtypes first and falls back to the
// PyTorch reference; the TORCH_CHECKs here are the last line of defence, not the dispatch logic.
#include <torch/extension.h>

#include <string>
#include <tuple>

#include "cpu_kernels.h"
#include "cuda_kernels.h"

#ifdef BLOOM_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace {

namespace cpu = bloomkernels::cpu;
using bloomkernels::acc_t;

// Which build of the CPU kernels runs (cpu_kernels.h): AVX2 + FMA where CPUID has both, else baseline.
// set_cpu_isa("baseline") lets the tests run the baseline build on an AVX2 machine.
bool detect_avx2() {
#if defined(BLOOM_HAVE_CPU_AVX2)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}
bool use_avx2 = detect_avx2();

const char* cpu_isa() { return use_avx2 ? "avx2+fma" : "baseline"; }

std::string set_cpu_isa(const std::string& isa) {
  const std::string old = cpu_isa();
  TORCH_CHECK(isa == "baseline" || isa == "avx2+fma", "set_cpu_isa: expected 'baseline' or 'avx2+fma', got ", isa);
  TORCH_CHECK(isa == "baseline" || detect_avx2(), "set_cpu_isa: this CPU (or build) has no AVX2 + FMA");
  use_avx2 = isa == "avx2+fma";
  return old;
}

// CPU_KERNEL(fn<T>)(args...): the chosen build's fn.
#if defined(BLOOM_HAVE_CPU_AVX2)
#define CPU_KERNEL(fn) (use_avx2 ? &bloomkernels::cpu_avx2::fn : &bloomkernels::cpu::fn)
#else
#define CPU_KERNEL(fn) (&bloomkernels::cpu::fn)
#endif

at::ScalarType acc_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// gamma/beta/bias/slopes are [cols] or [heads]: cast once to the accumulation dtype (cheap).
at::Tensor as_acc(const at::Tensor& t, const at::Tensor& like) {
  return t.to(acc_dtype(like)).contiguous();
}

template <typename F>
void dispatch_cpu(at::ScalarType st, const char* name, F&& f) {
  switch (st) {
    case at::kFloat: f(float{}); break;
    case at::kDouble: f(double{}); break;
    case at::kBFloat16: f(c10::BFloat16{}); break;
    case at::kHalf: f(c10::Half{}); break;
    default: TORCH_CHECK(false, name, ": unsupported dtype ", st, " (expected float32/64, bfloat16, float16)");
  }
}

#ifdef BLOOM_WITH_CUDA
namespace cuda = bloomkernels::cuda;

cuda::DType cuda_dtype(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return cuda::DType::kFloat32;
    case at::kHalf: return cuda::DType::kFloat16;
    case at::kBFloat16: return cuda::DType::kBFloat16;
    default: TORCH_CHECK(false, "CUDA kernels take float32/float16/bfloat16, got ", t.scalar_type());
  }
}

void* stream() { return static_cast<void*>(c10::cuda::getCurrentCUDAStream().stream()); }

void check_launch(int code, const char* name) {
  TORCH_CHECK(code == 0, name, " launch failed: ", cuda::error_string(code));
}

at::Tensor workspace(const at::Tensor& like, int64_t rows, int64_t cols) {
  const auto n = static_cast<int64_t>(cuda::column_reduce_workspace(rows, cols));
  return at::empty({n > 0 ? n : 1}, like.options().dtype(at::kFloat));
}
#endif

int64_t last_dim(const at::Tensor& x) { return x.dim() == 0 ? 1 : x.size(-1); }

// ---------------------------------------------------------------- LayerNorm
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_fwd(const at::Tensor& x_, const at::Tensor& gamma_,
                                                              const at::Tensor& beta_, double eps) {
  const auto x = x_.contiguous();
  const int64_t cols = last_dim(x), rows = x.numel() / cols;
  TORCH_CHECK(gamma_.numel() == cols && beta_.numel() == cols, "layer_norm: weight/bias must have ", cols,
              " elements");
  const auto gamma = as_acc(gamma_, x), beta = as_acc(beta_, x);
  auto y = at::empty_like(x);
  auto stat_opts = x.options().dtype(acc_dtype(x));
  auto mean = at::empty({rows}, stat_opts), rstd = at::empty({rows}, stat_opts);
  if (x.is_cuda()) {
#ifdef BLOOM_WITH_CUDA
    const c10::cuda::CUDAGuard guard(x.device());
    check_launch(cuda::layer_norm_forward(cuda_dtype(x), x.data_ptr(), gamma.data_ptr<float>(),
                                          beta.data_ptr<float>(), y.data_ptr(), mean.data_ptr<float>(),
                                          rstd.data_ptr<float>(), rows, cols, eps, stream()),
                 "layer_norm_forward");
    return {y, mean, rstd};
#else
    TORCH_CHECK(false, "bloomstack kernels were built without CUDA");
#endif
  }
  dispatch_cpu(x.scalar_type(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    CPU_KERNEL(layer_norm_forward<T>)(x.data_ptr<T>(), gamma.data_ptr<A>(), beta.data_ptr<A>(), y.data_ptr<T>(),
                               mean.data_ptr<A>(), rstd.data_ptr<A>(), rows, cols, eps);
  });
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_bwd(const at::Tensor& dy_, const at::Tensor& x_,
                                                              const at::Tensor& gamma_, const at::Tensor& mean,
                                                              const at::Tensor& rstd) {
  const auto x = x_.contiguous(), dy = dy_.contiguous();
  const int64_t cols = last_dim(x), rows = x.numel() / cols;
  const auto gamma = as_acc(gamma_, x);
  auto dx = at::empty_like(x);
  auto dgamma = at::empty({cols}, gamma.options()), dbeta = at::empty({cols}, gamma.options());
  if (x.is_cuda()) {
#ifdef BLOOM_WITH_CUDA
    const c10::cuda::CUDAGuard guard(x.device());
    auto ws = workspace(x, rows, cols);
    check_launch(cuda::layer_norm_backward(cuda_dtype(x), dy.data_ptr(), x.data_ptr(), gamma.data_ptr<float>(),
                                           mean.data_ptr<float>(), rstd.data_ptr<float>(), dx.data_ptr(),
                                           dgamma.data_ptr<float>(), dbeta.data_ptr<float>(),
                                           ws.data_ptr<float>(), rows, cols, stream()),
                 "layer_norm_backward");
    return {dx, dgamma, dbeta};
#else
    TORCH_CHECK(false, "bloomstack kernels were built without CUDA");
#endif
  }
  dispatch_cpu(x.scalar_type(), "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    CPU_KERNEL(layer_norm_backward<T>)(dy.data_ptr<T>(), x.data_ptr<T>(), gamma.data_ptr<A>(), mean.data_ptr<A>(),
                                rstd.data_ptr<A>(), dx.data_ptr<T>(), dgamma.data_ptr<A>(), dbeta.data_ptr<A>(),
                                rows, cols);
  });
  return {dx, dgamma, dbeta};
}

// ---------------------------------------------------------------- bias + GeLU
at::Tensor bias_gelu_fwd(const at::Tensor& x_, const at::Tensor& bias_) {
  const auto x = x_.contiguous();
  const int64_t cols = last_dim(x), rows = x.numel() / cols;
  TORCH_CHECK(bias_.numel() == cols, "bias_gelu: bias must have ", cols, " elements");
  const auto bias = as_acc(bias_, x);
  auto y = at::empty_like(x);
  if (x.is_cuda()) {
#ifdef BLOOM_WITH_CUDA
    const c10::cuda::CUDAGuard guard(x.device());
    check_launch(cuda::bias_gelu_forward(cuda_dtype(x), x.data_ptr(), bias.data_ptr<float>(), y.data_ptr(), rows,
                                         cols, stream()),
                 "bias_gelu_forward");
    return y;
#else
    TORCH_CHECK(false, "bloomstack kernels were built without CUDA");
#endif
  }
  dispatch_cpu(x.scalar_type(), "bias_gelu", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    CPU_KERNEL(bias_gelu_forward<T>)(x.data_ptr<T>(), bias.data_ptr<A>(), y.data_ptr<T>(), rows, cols);
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> bias_gelu_bwd(const at::Tensor& dy_, const at::Tensor& x_,
                                                 const at::Tensor& bias_) {
  const auto x = x_.contiguous(), dy = dy_.contiguous();
  const int64_t cols = last_dim(x), rows = x.numel() / cols;
  const auto bias = as_acc(bias_, x);
  auto dx = at::empty_like(x);
  auto dbias = at::empty({cols}, bias.options());
  if (x.is_cuda()) {
#ifdef BLOOM_WITH_CUDA
    const c10::cuda::CUDAGuard guard(x.device());
    auto ws = workspace(x, rows, cols);
    check_launch(cuda::bias_gelu_backward(cuda_dtype(x), dy.data_ptr(), x.data_ptr(), bias.data_ptr<float>(),
                                          dx.data_ptr(), dbias.data_ptr<float>(), ws.data_ptr<float>(), rows, cols,
                                          stream()),
                 "bias_gelu_backward");
    return {dx, dbias};
#else
    TORCH_CHECK(false, "bloomstack kernels were built without CUDA");
#endif
  }
  dispatch_cpu(x.scalar_type(), "bias_gelu", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    CPU_KERNEL(bias_gelu_backward<T>)(dy.data_ptr<T>(), x.data_ptr<T>(), bias.data_ptr<A>(), dx.data_ptr<T>(),
                               dbias.data_ptr<A>(), rows, cols);
  });
  return {dx, dbias};
}

// ---------------------------------------------------------------- ALiBi causal softmax
at::Tensor alibi_softmax_fwd(const at::Tensor& scores_, const at::Tensor& slopes_, double scale) {
  TORCH_CHECK(scores_.dim() == 4, "alibi_softmax: scores must be [b, np, sq, sk], got ", scores_.sizes());
  const auto scores = scores_.contiguous();
  const int64_t b = scores.size(0), h = scores.size(1), sq = scores.size(2), sk = scores.size(3);
  TORCH_CHECK(slopes_.numel() == h, "alibi_softmax: slopes must have ", h, " elements");
  const auto slopes = as_acc(slopes_, scores);
  auto probs = at::empty_like(scores);
  if (scores.is_cuda()) {
#ifdef BLOOM_WITH_CUDA
    const c10::cuda::CUDAGuard guard(scores.device());
    check_launch(cuda::alibi_softmax_forward(cuda_dtype(scores), scores.data_ptr(), slopes.data_ptr<float>(),
                                             probs.data_ptr(), b, h, sq, sk, scale, stream()),
                 "alibi_softmax_forward");
    return probs;
#else
    TORCH_CHECK(false, "bloomstack kernels were built without CUDA");
#endif
  }
  dispatch_cpu(scores.scalar_type(), "alibi_softmax", [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    CPU_KERNEL(alibi_softmax_forward<T>)(scores.data_ptr<T>(), slopes.data_ptr<A>(), probs.data_ptr<T>(), b, h, sq, sk,
                                  scale);
  });
  return probs;
}

at::Tensor alibi_softmax_bwd(const at::Tensor& dprobs_, const at::Tensor& probs_, double scale) {
  TORCH_CHECK(probs_.dim() == 4, "alibi_softmax: probs must be [b, np, sq, sk], got ", probs_.sizes());
  const auto probs = probs_.contiguous(), dprobs = dprobs_.contiguous();
  const int64_t b = probs.size(0), h = probs.size(1), sq = probs.size(2), sk = probs.size(3);
  auto dscores = at::empty_like(probs);
  if (probs.is_cuda()) {
#ifdef BLOOM_WITH_CUDA
    const c10::cuda::CUDAGuard guard(probs.device());
    check_launch(cuda::alibi_softmax_backward(cuda_dtype(probs), dprobs.data_ptr(), probs.data_ptr(),
                                              dscores.data_ptr(), b, h, sq, sk, scale, stream()),
                 "alibi_softmax_backward");
    return dscores;
#else
    TORCH_CHECK(false, "bloomstack kernels were built without CUDA");
#endif
  }
  dispatch_cpu(probs.scalar_type(), "alibi_softmax", [&](auto tag) {
    using T = decltype(tag);
    CPU_KERNEL(alibi_softmax_backward<T>)(dprobs.data_ptr<T>(), probs.data_ptr<T>(), dscores.data_ptr<T>(), b, h, sq, sk,
                                   scale);
  });
  return dscores;
}

bool built_with_cuda() {
#ifdef BLOOM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int64_t cuda_softmax_max_keys() {
#ifdef BLOOM_WITH_CUDA
  return bloomkernels::cuda::alibi_softmax_max_keys();
#else
  return 0;
#endif
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "bloomstack fused LayerNorm, ALiBi causal softmax and bias-GeLU (CPU + optional CUDA)";
  m.def("layer_norm_fwd", &layer_norm_fwd, "LayerNorm forward -> (y, mean, rstd)");
  m.def("layer_norm_bwd", &layer_norm_bwd, "LayerNorm backward -> (dx, dgamma, dbeta) in fp32/fp64");
  m.def("bias_gelu_fwd", &bias_gelu_fwd, "tanh-GeLU(x + bias)");
  m.def("bias_gelu_bwd", &bias_gelu_bwd, "bias-GeLU backward -> (dx, dbias in fp32/fp64)");
  m.def("alibi_softmax_fwd", &alibi_softmax_fwd, "causal softmax(scale * s + slope_h * j)");
  m.def("alibi_softmax_bwd", &alibi_softmax_bwd, "causal ALiBi softmax backward");
  m.def("built_with_cuda", &built_with_cuda);
  m.def("cuda_softmax_max_keys", &cuda_softmax_max_keys);
  m.def("cpu_isa", &cpu_isa, "which build of the CPU kernels runs: 'avx2+fma' or 'baseline'");
  m.def("set_cpu_isa", &set_cpu_isa, "(tests) run the 'baseline' or 'avx2+fma' CPU build; returns the old one");
}
