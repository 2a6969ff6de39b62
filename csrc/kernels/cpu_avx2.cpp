// The CPU kernels compiled a second time for AVX2 + FMA, as namespace bloomkernels::cpu_avx2.
//
// Why: the build cache may move between machines, so the kernels are compiled for the baseline ISA
// (SSE2 on x86-64: 4 lanes, no FMA), which leaves about half the speed of exp/tanh-heavy loops on the
// table on any x86 server of the last decade. bindings.cpp calls this build when CPUID reports AVX2 and
// FMA, the baseline one otherwise. Every header is included before the target pragma, so only the
// kernels below are compiled for AVX2 (library inline functions keep the baseline ISA and stay safe to
// link against baseline code). Contraction stays off (the optimize pragma): a*b+c rounds twice, as in the
// baseline build, so LayerNorm's g - mean(g) still cancels exactly at width 1 (an FMA leaves the product's
// rounding error there, which 1/sqrt(eps) magnifies past the tests' 1e-6).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu_kernels.h"

#if defined(BLOOM_HAVE_CPU_AVX2)
#pragma GCC target("avx2,fma")
#pragma GCC optimize("fp-contract=off")
#define BLOOM_CPU_NS cpu_avx2
#include "alibi_softmax_cpu.cpp"
#include "bias_gelu_cpu.cpp"
#include "layer_norm_cpu.cpp"
#endif
