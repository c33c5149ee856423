// The flags that describe a training workload, shared by `train` and `characterize`:
// each declared once, with its default and unit, and turned into a TrainConfig.
#pragma once

#include <CLI/CLI.hpp>
#include <set>
#include <string>

#include "core/parse.h"
#include "engine/trainer.h"

namespace tandem::cli {

// --bucket-mb and --first-bucket-mb (and --sweep bucket-mb): up to 1 TiB, so that the cap
// in bytes fits an int64 with room to spare.
inline constexpr Bounds kBucketMbBounds{.min = 0, .max = 1 << 20, .min_open = true};

struct WorkloadFlags {
  int ranks = 2;
  std::string model = "mlp:8x1024";
  ShapeOverrides shape;  // --layers, --dim, --heads, --seq (0: the model's)
  std::string data;      // --data FILE
  int eval_every = 0;
  int batch = 64;  // 0: the model preset's batch, else 64
  int steps = 50;
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  std::string strategy = "bucketed";
  double bucket_mb = 25;
  double first_bucket_mb = 1;
  int accumulate = 1;
  bool overlap_optimizer = false;
  bool double_buffer = false;
  std::string compress = "none";
  double layer_drop = 0;
  bool find_unused = false;
  std::string recompute = "none";
  int tensor = 1;                      // --tensor: tensor-parallel ranks per layer
  bool sequence_parallel = false;      // --sequence-parallel
  bool tp_overlap = false;             // --tp-overlap
  int pipeline = 1;                    // stages
  std::string schedule = "1f1b";
  int micro_batches = 0;               // 0: not given
  std::string split;                   // units per model chunk, "3,3,2"
  int prefetch = 1;                    // fsdp
  bool no_reshard_after_forward = false;  // fsdp
  std::string link;
  std::uint64_t seed = 1;
  int threads = 1;
  std::string bind = "auto";  // --bind: auto or none (binds_ranks())
  double timeout_s = 300;
  bool no_timeline = false;
  bool verify = false;
  std::string device = "cpu";
  std::string precision = "fp32";
  std::string gemm = std::string(to_string(default_gemm_library()));
  std::string device_comm = "auto";
  // The flags the user gave for every run of the command (a characterize sweep's axes
  // aside): one that cannot apply to the run is refused naming both flags.
  std::set<std::string> given;

  // --bind auto: in-process ranks bound to CPUs of their own (RunSpec::bind).
  bool binds_ranks() const { return bind == "auto"; }
};

// The names of the options given on `command`'s line ("--prefetch", ...).
std::set<std::string> given_options(const CLI::App& command);

// Which flags a command takes: a run here takes them all; a simulation (tandem simulate)
// takes those that shape the step (model, batch, strategy, pipeline, precision) and
// declares --ranks itself, leaving out what only a run here uses (data, optimizer
// settings, seed, threads, timeout, device, GEMM library, link emulation, verify).
enum class WorkloadUse : std::uint8_t { kRun, kSimulate };

void add_workload_flags(CLI::App& app, WorkloadFlags& flags, WorkloadUse use = WorkloadUse::kRun);
// Parses the string-valued flags; throws UsageError naming the flag. `runs_here` false: a
// configuration to simulate, whose memory and device are the cluster's, not this machine's.
TrainConfig to_train_config(const WorkloadFlags& flags, bool batch_given, bool runs_here = true);

// The flags for ranks that are threads of this process (--link, --bind none), refused in
// one line under a launcher's `backend`.
void check_in_process_flags(const WorkloadFlags& flags, const std::string& backend);

// --threads, --gemm and, where this CPU runs it, --precision, applied process-wide
// before a header describes them (a training run applies its own again; a microbenchmark
// runs on these); throws UsageError naming the flag.
void apply_cpu_gemm_flags(const WorkloadFlags& flags);
// The header's "GEMM:" line for the cpu device (library, kernel, threads per rank), and
// the one warning line of a generic kernel; for train and characterize alike.
void print_cpu_gemm_lines();

}  // namespace tandem::cli
