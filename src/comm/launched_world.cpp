#include "comm/launched_world.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "core/parse.h"

namespace tandem {
namespace {

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

}  // namespace tandem
