// Function multiversioning for the CPU's elementwise and reduction loops: one portable
// binary whose hot loops exist in three builds (x86-64-v4: AVX-512; x86-64-v3: AVX2 and
// FMA; the baseline), the best one the CPU runs picked once at load time (GCC's
// target_clones, an ifunc per function). Loops inline their helpers into each build, so
// nothing built for AVX-512 is reachable on a CPU without it. Every layer's loops use it
// (the model's kernels, the local backend's reductions, the 16-bit casts of core/half.h).
//
// Each build is deterministic on its own; two CPUs that pick different builds may
// differ in the last bits (FMA contraction), as two BLAS kernels do. ThreadSanitizer
// builds define TANDEM_NO_CPU_CLONES (the loader runs resolvers before its runtime).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(TANDEM_NO_CPU_CLONES)
#define TANDEM_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TANDEM_CPU_CLONES
#endif
