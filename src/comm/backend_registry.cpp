// The backend registry and the launcher's view of the job.
#include "comm/backend_registry.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>

#include "core/error.h"
#include "core/parse.h"

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

const Backend* find_backend(std::string_view name) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.backends.find(name);
  // Entries are never removed, and std::map nodes do not move: the pointer stays valid.
  return it == r.backends.end() ? nullptr : &it->second;
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
    if (name == "nccl" || name == "emulated") {
      throw UsageError(prefix + "this tandem was built without " +
                       (name == "nccl" ? "NCCL" : "the CUDA toolkit") + " (see docs/GPU.md)");
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

std::string failure_line(int rank, std::string what) {
  std::replace(what.begin(), what.end(), '\n', ' ');
  const std::string me = "rank " + std::to_string(rank);
  if (what.find(me) != std::string::npos) return "tandem: " + what;
  return "tandem: " + me + ": " + what;
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
