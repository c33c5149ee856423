// Where a command's ranks run, shared by `train` and `characterize`: --backend and the
// mpi backend's tunables (each declared once), the rank count of a launcher's job, and
// the line that says where the ranks are. The Job itself is engine/launch.h.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "engine/launch.h"
#include "report/results_dir.h"

namespace tandem::cli {

struct JobFlags {
  std::string backend = "auto";        // auto, local or mpi (resolve_backend)
  std::string mpi_allreduce = "auto";  // auto, native or ring (docs/MPI.md)
  double mpi_poll_us = 0;              // the progress thread's idle sleep; 0: yield
};

void add_job_flags(CLI::App& app, JobFlags& flags);

// How power is sampled on rank 0's host (docs/METRICS.md, "Power").
struct PowerFlags {
  int interval_ms = 50;
  std::string powercap_root = "/sys/class/powercap";
};

void add_power_flags(CLI::App& app, PowerFlags& flags);

// The options of a Job on `flags`, whose collectives time out after `timeout_ns`.
BackendOptions job_options(const JobFlags& flags, std::int64_t timeout_ns);

// The rank count on `backend` (as resolve_backend gives it), known before the Job exists:
// `ranks` in-process; under a launcher its process count, where a --ranks that disagrees
// (`ranks_given`) is a UsageError.
int job_ranks(const std::string& backend, int ranks, bool ranks_given);

// Once the Job exists: a process job of another size than job_ranks() planned for (a
// launcher whose environment we misread) ends the job with one line.
void expect_job_size(Job& job, int ranks);

// What the ranks are: "local backend, threads of one process", or "mpi backend, 2
// processes on 1 host(s), 2 on rank 0's host NAME".
std::string describe_ranks(const Job& job);

// The results side of a resumable command (characterize's sweep, tune's measurements) on
// this process: rank 0 alone opens --out and decides which points are finished; in a
// process job it broadcasts that set, or the usage error that refused the directory, so
// that every rank skips the same points or stops together.
struct SharedOutputs {
  std::unique_ptr<ResultsWriter> writer;  // rank 0 with --out (it holds the lock: not moved)
  std::set<std::string> finished;         // the points every rank skips (--resume)
  std::string refused;                    // the usage error that refused --out, on every rank
};
// `out` empty: no directory. In-process a refusal is thrown; in a process job it is in
// `refused` on every rank, the leader having printed it (before the others learn of it and
// exit): every rank returns 2.
SharedOutputs open_shared_outputs(Job& job, const std::string& out, ResultsCommand command,
                                  const std::vector<std::string>& argv, const OutputPolicy& policy);

// Rank 0's text, the same on every rank of a process job (in-process: as given); a
// failure of the exchange ends the job.
std::string share_from_leader(Job& job, const std::string& text);

}  // namespace tandem::cli
