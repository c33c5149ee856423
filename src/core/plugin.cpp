#include "core/plugin.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>

namespace tandem {
namespace {

std::string load() {
#ifndef TANDEM_GPU_PLUGIN_FILE
  return "this tandem was built without the CUDA toolkit (see docs/GPU.md)";
#else
  std::filesystem::path file;
  if (const char* chosen = std::getenv("TANDEM_GPU_PLUGIN"); chosen != nullptr && *chosen != 0) {
    file = chosen;
  } else {
    // Beside the library (or program) this function is part of.
    Dl_info self{};
    if (dladdr(reinterpret_cast<const void*>(&load_gpu_plugin), &self) == 0 ||
        self.dli_fname == nullptr) {
      return "cannot tell where libtandem is, to find " + std::string(TANDEM_GPU_PLUGIN_FILE);
    }
    file = std::filesystem::path(self.dli_fname).parent_path() / TANDEM_GPU_PLUGIN_FILE;
  }
  // Never unloaded: what it registered stays in the registries for the process's life.
  if (dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
    const char* why = dlerror();
    return "the GPU plug-in " + file.string() +
           " could not be loaded: " + (why != nullptr ? why : "unknown error");
  }
  return "";
#endif
}

}  // namespace

const std::string& load_gpu_plugin() {
  static const std::string result = load();
  return result;
}

}  // namespace tandem
