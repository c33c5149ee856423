// The CPU's mlp (mlp.h): the passes of mlp_passes.h on the CPU backend.
#include "model/mlp.h"

#include "model/mlp_passes.h"

namespace tandem {

template class MlpOn<CpuBackend<float>>;

}  // namespace tandem
