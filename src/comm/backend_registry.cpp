// The process-backend registry and the launcher's view of the job.
#include "comm/backend_registry.h"

#include <cstdlib>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/parse.h"

namespace tandem {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, ProcessBackendFactory, std::less<>> factories;
};

// Function-local: static initializers of other libraries may register before main().
Registry& registry() {
  static Registry instance;
  return instance;
}

// The integer in environment variable `name`, or -1 when unset or not a number.
int env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return -1;
  try {
    return static_cast<int>(parse_int(value, name));
  } catch (const UsageError&) {
    return -1;
  }
}

}  // namespace

bool register_process_backend(std::string_view name, ProcessBackendFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.factories[std::string(name)] = factory;
  return true;
}

ProcessBackendFactory find_process_backend(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.factories.find(name);
  return it == r.factories.end() ? nullptr : it->second;
}

std::vector<std::string> process_backend_names() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, factory] : r.factories) names.push_back(name);
  return names;
}

LaunchedWorld launched_world() {
  struct Source {
    const char* launcher;
    const char* size;
    const char* rank;
  };
  static constexpr Source kSources[] = {
      {"mpirun (Open MPI)", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"},
      {"PMI", "PMI_SIZE", "PMI_RANK"},
      {"PMIx", "PMIX_SIZE", "PMIX_RANK"},
      {"srun (Slurm)", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID"},
  };
  for (const Source& s : kSources) {
    const int size = env_int(s.size);
    if (size >= 1) return {s.launcher, size, std::max(0, env_int(s.rank))};
  }
  return {};
}

std::string resolve_backend(std::string_view requested) {
  std::string name(requested);
  if (name == "auto") name = launched_world().size > 1 ? "mpi" : "local";
  if (name == "local") return name;
  if (find_process_backend(name) != nullptr) return name;
  if (name == "mpi") {
    throw UsageError(
        "--backend mpi: this tandem was built without MPI (install libopenmpi-dev and "
        "rebuild; CMake said so at configure time)");
  }
  throw UsageError("--backend: unknown backend '" + name + "' (expected auto, local or mpi)");
}

}  // namespace tandem
