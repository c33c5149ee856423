// Where a command's ranks run, shared by `train` and `characterize`: --backend and the
// mpi backend's tunables (each declared once), the rank count of a launcher's job, and
// the line that says where the ranks are. The Job itself is engine/launch.h.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "engine/launch.h"

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

}  // namespace tandem::cli
