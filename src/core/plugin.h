// The GPU plug-in: a build with the CUDA toolkit puts its GPU parts (the CUDA model, the
// device communicators, the GPU microbenchmark) in libtandem_gpu.so beside libtandem.so
// instead of in the programs, so that a command that uses no GPU maps no CUDA library
// (cuBLAS, cuDNN-sized libraries: hundreds of MB of address space and a tenth of a second
// of start-up). The registries that look a GPU part up (find_device_models, find_backend)
// load it on the first miss; its static initializers register the parts as a program's
// would. Programs that link the GPU parts themselves (the tests) never get here.
#pragma once

#include <string>

namespace tandem {

// Loads the plug-in once (later calls return the first call's answer): "" when it is
// loaded, else one line saying why not (this build has no GPU parts; the file is missing;
// a CUDA library it needs is not installed). TANDEM_GPU_PLUGIN, where set, names the file.
const std::string& load_gpu_plugin();

}  // namespace tandem
