// What a launcher (mpirun, srun, mpiexec.hydra) told this process, read from its
// environment before any library initializes, and the one line a failing rank prints.
#pragma once

#include <string>

namespace tandem {

// From OMPI_COMM_WORLD_SIZE/RANK (Open MPI), PMI_SIZE/RANK and PMIX_SIZE/RANK (Hydra,
// srun --mpi=pmi2|pmix), SLURM_STEP_NUM_TASKS / SLURM_PROCID (srun). SLURM_NTASKS alone
// does not count: a batch script sees it too while it is a single process.
struct LaunchedWorld {
  std::string launcher;  // "" when not launched by one
  int size = 1;
  int rank = 0;
};
LaunchedWorld launched_world();

// The one line a failing rank of a job prints: "tandem: rank R: <what>" (the rank once,
// when <what> names it already), newlines flattened.
std::string failure_line(int rank, std::string what);

}  // namespace tandem
