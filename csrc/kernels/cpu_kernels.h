// CPU kernel entry points (raw pointers, row-major contiguous). Implemented in *_cpu.cpp and
// instantiated for float, double, c10::BFloat16 and c10::Half; `A` is acc_t<T> (fp32, or fp64
// for double inputs). "rows" is the product of all leading dims, "cols" the last dim.
//
// Two builds of the same sources: bloomkernels::cpu for the baseline ISA (SSE2 on x86-64, NEON on
// aarch64) and, on x86-64, bloomkernels::cpu_avx2 (cpu_avx2.cpp: AVX2 + FMA); bindings.cpp picks one at
// run time from CPUID. This header declares both (it includes cpu_kernels_decl.h once per namespace).
#pragma once

#include "cpu_common.h"

namespace bloomkernels {

// Number of visible keys of query row i (may be <= 0 when sq > sk: the reference then attends
// uniformly over its finfo.min entries and passes no gradient).
inline int64_t causal_limit(int64_t i, int64_t sq, int64_t sk) { return sk - sq + i + 1; }

}  // namespace bloomkernels

#define BLOOM_CPU_DECL_NS cpu
#include "cpu_kernels_decl.h"
#undef BLOOM_CPU_DECL_NS
#if defined(__x86_64__)
#define BLOOM_HAVE_CPU_AVX2 1
#define BLOOM_CPU_DECL_NS cpu_avx2
#include "cpu_kernels_decl.h"
#undef BLOOM_CPU_DECL_NS
#endif
