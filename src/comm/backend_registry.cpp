// The backend registry and the launcher's view of the job.
#include "comm/backend_registry.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/parse.h"
#include "core/plugin.h"

namespace tandem {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, Backend, std::less<>> backends;
};

// Function-local: static initializers of other libraries may register before main().
Registry& registry() {
  static Registry instance;
  return instance;
}

const Backend* registered(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.backends.find(name);
  // Entries are never removed, and std::map nodes do not move: the pointer stays valid.
  return it == r.backends.end() ? nullptr : &it->second;
}

bool is_device_backend(std::string_view name) {
  return name == "nccl" || name == "shared" || name == "emulated";
}

std::string known_names() {
  std::string text;
  for (const std::string& name : backend_names()) text += (text.empty() ? "" : ", ") + name;
  return text.empty() ? "none" : text;
}

}  // namespace

bool register_backend(Backend backend) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const std::string name = backend.name;
  r.backends[name] = std::move(backend);
  return true;
}

// The device backends live in the GPU plug-in (core/plugin.h), loaded on the first miss.
const Backend* find_backend(std::string_view name) {
  if (const Backend* backend = registered(name)) return backend;
  if (!is_device_backend(name) || !load_gpu_plugin().empty()) return nullptr;
  return registered(name);
}

std::vector<std::string> backend_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, backend] : r.backends) names.push_back(name);
  return names;
}

const Backend& require_backend(std::string_view name, std::string_view flag) {
  const Backend* backend = find_backend(name);
  const std::string prefix = std::string(flag) + " " + std::string(name) + ": ";
  if (backend == nullptr) {
    if (name == "mpi") {
      throw UsageError(prefix +
                       "this tandem was built without MPI (install libopenmpi-dev and rebuild; "
                       "CMake said so at configure time)");
    }
    if (is_device_backend(name)) {
      throw UsageError(prefix +
                       (load_gpu_plugin().empty()
                            ? std::string("this tandem was built without NCCL (see docs/GPU.md)")
                            : load_gpu_plugin()));
    }
    throw UsageError(prefix + "unknown backend (this tandem has " + known_names() + ")");
  }
  if (backend->unavailable != nullptr) {
    if (const std::string why = backend->unavailable(); !why.empty()) {
      throw UsageError(prefix + why);
    }
  }
  return *backend;
}

std::string resolve_backend(std::string_view requested) {
  std::string name(requested);
  if (name == "auto") name = launched_world().size > 1 ? "mpi" : "local";
  if (name != "local" && name != "mpi") {
    throw UsageError("--backend: unknown backend '" + name + "' (expected auto, local or mpi)");
  }
  require_backend(name, "--backend");
  return name;
}

}  // namespace tandem
