// The CPU's loop builds (TANDEM_CPU_CLONES, core/cpu_clones.h) as the compute layer
// reports them. The GEMMs dispatch inside their library (compute/cpu/blas.h).
#pragma once

#include <string>

#include "core/cpu_clones.h"

namespace tandem {

// The build of the TANDEM_CPU_CLONES loops that this CPU runs: "x86-64-v4 (AVX-512)",
// "x86-64-v3 (AVX2)", "x86-64 (SSE2)", or "portable" where there are no clones.
std::string cpu_loops_isa();

}  // namespace tandem
