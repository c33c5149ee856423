// A workload is anything that can run the four scenarios of the characterization
// methodology (docs/METRICS.md) and hand back a timeline of each:
//   compute-only  the iteration with communication switched off
//   comm-only     the same collectives with no compute
//   sequential    compute finishes, then all communication
//   overlapped    the workload's overlap strategy
// Three kinds exist: a training configuration, the GEMM + all-reduce microbenchmark,
// and a synthetic one whose ground truth is known (the metric suite's oracle). Every kind
// runs on any Job (engine/launch.h): threads of one process or the ranks of an mpirun job.
#pragma once

#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "engine/launch.h"
#include "engine/trainer.h"
#include "simulate/simulator.h"
#include "timeline/recorder.h"

namespace tandem {

enum class Scenario : std::uint8_t { kComputeOnly, kCommOnly, kSequential, kOverlapped };
inline constexpr std::array<Scenario, 4> kAllScenarios = {
    Scenario::kComputeOnly, Scenario::kCommOnly, Scenario::kSequential, Scenario::kOverlapped};
std::string_view to_string(Scenario scenario);  // "compute-only", ...

class Workload {
 public:
  virtual ~Workload() = default;
  // One line: what runs.
  virtual std::string describe() const = 0;
  // The configuration, for summary.json.
  virtual nlohmann::json config_json() const = 0;
  // Runs `steps` iterations (steps 0..steps-1) of one scenario on every rank of `job`
  // (threads of this process, or the processes of a launcher's job: every process calls
  // it, and only the leader's timeline holds the spans).
  virtual Timeline run(Job& job, Scenario scenario, int steps) = 0;
};

// A `tandem train` configuration; its steps, model and strategy are the workload's.
std::unique_ptr<Workload> make_train_workload(const TrainConfig& config);
// `config` as it runs `scenario`: communication off (compute-only), no math (comm-only),
// launched only after backward (sequential), or as configured (overlapped).
TrainConfig scenario_config(TrainConfig config, Scenario scenario);
// The same configuration predicted on a cluster (simulate/simulator.h) instead of run:
// each scenario is a simulation; the Job is not used.
std::unique_ptr<Workload> make_simulated_workload(const TrainConfig& config,
                                                  const SimulateOptions& options);

// The paper's Figure 8 microbenchmark: a loop of N x N x N sgemm calls on every rank
// while an all-reduce of `allreduce_bytes` runs, vs each alone and both in series.
struct MicrobenchSpec {
  int gemm_n = 0;
  int gemm_count = 0;  // sgemm calls per iteration; 0: calibrated to match the all-reduce
  std::int64_t allreduce_bytes = 0;
  int ranks = 2;  // in-process jobs; a process job has its own count
  int blas_threads = 1;
  bool bind = true;  // RunSpec::bind
  LinkModel link{};

  // "gemm=2048,allreduce=256MiB" or "gemm=512x40,allreduce=64MiB"; throws UsageError.
  static MicrobenchSpec parse(std::string_view text);
  std::string to_string() const;
};
std::unique_ptr<Workload> make_microbench_workload(const MicrobenchSpec& spec);

// Compute and communication phases of given durations, cut into `chunks`: after
// compute chunk i, communication chunk i is handed to the rank's communication thread,
// which runs chunks one after another. `sleep` mode sleeps (an offloaded NIC: no
// contention by construction); `busy` mode does real work calibrated to the durations
// when run alone (arithmetic for compute, memory copies for communication), so
// contention shows; `ideal` mode runs nothing and records the spans of the ideal
// schedule on a virtual clock, so its timeline is exactly the one computed by hand: the
// metric suite's oracle, free of the machine's timing.
enum class SyntheticMode : std::uint8_t { kSleep, kBusy, kIdeal };

struct SyntheticSpec {
  std::int64_t compute_ns = 0;
  std::int64_t comm_ns = 0;
  int chunks = 1;
  SyntheticMode mode = SyntheticMode::kSleep;
  bool busy() const { return mode == SyntheticMode::kBusy; }
  int ranks = 1;  // in-process jobs; a process job has its own count

  // "synthetic:compute=350ms,comm=175ms,chunks=10[,mode=sleep|busy|ideal]"; UsageError.
  static SyntheticSpec parse(std::string_view text);
  std::string to_string() const;
};
std::unique_ptr<Workload> make_synthetic_workload(const SyntheticSpec& spec);

}  // namespace tandem
