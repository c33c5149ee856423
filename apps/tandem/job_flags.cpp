#include "job_flags.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "comm/process_communicator.h"
#include "core/error.h"
#include "flag_checks.h"

namespace tandem::cli {

void add_job_flags(CLI::App& app, JobFlags& f) {
  app.add_option("--backend", f.backend,
                 "Communicator: local (ranks are threads of this process), mpi (each process "
                 "of an mpirun/srun job is one rank; rank 0 prints and writes), or auto (mpi "
                 "when launched by one with more than one process, else local)")
      ->check(CLI::IsMember({"auto", "local", "mpi"}))
      ->capture_default_str();
  app.add_option("--mpi-allreduce", f.mpi_allreduce,
                 "mpi allreduce algorithm: native (the library's MPI_Iallreduce), ring "
                 "(segmented ring over point-to-point), or auto (native below 256 KiB, ring "
                 "from there); see docs/MPI.md")
      ->check(CLI::IsMember({"auto", "native", "ring"}))
      ->capture_default_str();
  app.add_option("--mpi-poll-us", f.mpi_poll_us,
                 "mpi progress thread: microseconds to sleep between fruitless polls "
                 "(0: yield the core instead)")
      ->check(number_in({.min = 0, .max = 1e6}))
      ->capture_default_str();
}

void add_power_flags(CLI::App& app, PowerFlags& flags) {
  app.add_option("--power-interval-ms", flags.interval_ms,
                 "Power sampling interval (RAPL zones; NVML's GPUs with --device cuda)")
      ->check(integer_in(1, 60000))
      ->capture_default_str();
  app.add_option("--powercap-root", flags.powercap_root,
                 "Where RAPL zones are read (a directory laid out like /sys/class/powercap)")
      ->capture_default_str();
}

BackendOptions job_options(const JobFlags& f, std::int64_t timeout_ns) {
  return {.timeout = std::chrono::nanoseconds(timeout_ns),
          .mpi = {.allreduce_algorithm = f.mpi_allreduce,
                  .poll_sleep_ns = static_cast<std::int64_t>(f.mpi_poll_us * 1e3)}};
}

int job_ranks(const std::string& backend, int ranks, bool ranks_given) {
  if (backend == "local") return ranks;
  const int processes = launched_world().size;
  if (ranks_given && ranks != processes) {
    throw UsageError("--ranks " + std::to_string(ranks) + " does not match the " +
                     std::to_string(processes) + " processes of this " + backend +
                     " job (each process is one rank: set the count with mpirun -np or srun "
                     "-n, and leave --ranks out)");
  }
  return processes;
}

void expect_job_size(Job& job, int ranks) {
  const ProcessCommunicator* comm = job.process();
  if (comm == nullptr || comm->size() == ranks) return;
  job.fail(std::runtime_error("the launcher's environment says " + std::to_string(ranks) +
                              " processes but the job has " + std::to_string(comm->size())));
}

std::string describe_ranks(const Job& job) {
  const ProcessCommunicator* comm = job.process();
  if (comm == nullptr) return "local backend, threads of one process";
  return std::string(comm->backend_name()) + " backend, " + std::to_string(comm->size()) +
         " processes on " + std::to_string(comm->hosts()) + " host(s), " +
         std::to_string(comm->ranks_on_host()) + " on rank 0's host " + comm->host_name();
}

SharedOutputs open_shared_outputs(Job& job, const std::string& out, ResultsCommand command,
                                  const std::vector<std::string>& argv,
                                  const OutputPolicy& policy) {
  SharedOutputs shared;
  if (job.leader() && !out.empty()) {
    try {
      shared.writer = std::make_unique<ResultsWriter>(out, command, argv, policy);
      shared.finished = shared.writer->finished_points();
    } catch (const UsageError& e) {
      if (job.in_process()) throw;
      // Said here, before the decision goes out: the other ranks exit on it, and mpirun
      // ends the job (SIGTERM) at the first non-zero exit, which could cut this line.
      shared.refused = e.what();
      std::fprintf(stderr, "tandem: error: %s\n", shared.refused.c_str());
      std::fflush(stderr);
    } catch (const std::exception& e) {
      job.fail(e);  // in-process: rethrown
    }
  }
  if (job.process() == nullptr) return shared;
  const nlohmann::json mine = {{"refused", shared.refused}, {"finished", shared.finished}};
  const auto decided = nlohmann::json::parse(share_from_leader(job, mine.dump()));
  shared.refused = decided["refused"].get<std::string>();
  shared.finished = decided["finished"].get<std::set<std::string>>();
  return shared;
}

std::string share_from_leader(Job& job, const std::string& text) {
  ProcessCommunicator* comm = job.process();
  if (comm == nullptr) return text;
  try {
    return comm->broadcast_bytes(text, 0);
  } catch (const std::exception& e) {
    job.fail(e);
  }
}

}  // namespace tandem::cli
