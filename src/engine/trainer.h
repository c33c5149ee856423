// Data-parallel training of one rank, and the launcher that runs every rank of the
// local backend as a thread of this process.
//
// One step (iteration) on one rank:
//   for each of `accumulate` micro-batches: forward, backward (the reducer launches
//   each unit's all-reduce as backward completes its gradients; only on the last
//   micro-batch), then: wait for communication (wait spans), SGD, zero the gradients.
// The same loop serves every scenario of `tandem characterize`: communication off
// (compute-only) or deferred to after backward (sequential).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "compute/precision.h"
#include "ddp/reducer.h"
#include "model/model.h"
#include "timeline/recorder.h"

namespace tandem {

struct TrainConfig {
  ModelSpec model;
  int ranks = 2;
  int batch = 64;  // per rank, as in DDP
  int steps = 50;
  int accumulate = 1;  // micro-batches per synchronization
  SgdOptions sgd{};
  ReducerOptions reducer{};
  LinkModel link{};
  std::uint64_t seed = 1;
  int blas_threads = 1;  // per rank
  int data_batches = 8;  // distinct batches per rank's shard, cycled
  bool compute = true;   // false: the comm-only scenario (same collectives, no math)
  bool record = true;    // the timeline; off only to measure its own cost
  bool verify = false;   // hash parameters after every step and compare across ranks
  // Where the math runs (engine/device_trainer.h for the devices besides the CPU).
  Device device = Device::kCpu;
  Precision precision = Precision::kFp32;  // GEMM precision; the CPU computes in fp32 only
  std::string device_comm = "auto";        // device communicator: auto, nccl or emulated
};

// One rank's step, as printed and written to steps.csv.
struct StepRecord {
  int rank = 0;
  int step = 0;
  float loss = 0;                // mean over the step's micro-batches
  std::int64_t start_ns = 0;     // first forward
  std::int64_t end_ns = 0;       // optimizer done
  std::uint64_t param_hash = 0;  // with verify: FNV-1a of the parameters' bits
};

struct TrainResult {
  std::vector<StepRecord> steps;  // every rank's, sorted by (step, rank)
  Timeline timeline;
  std::vector<Bucket> buckets;      // the plan every rank used
  std::vector<float> final_params;  // rank 0's
  std::size_t spans_dropped = 0;
  std::string blas;  // BLAS in use, threads included
  // The communicator backend and, for process backends (mpi), the job's shape and how
  // well the ranks' clocks were aligned to rank 0's (process_launch.h).
  std::string backend = "local";
  std::string backend_details;
  int hosts = 1;
  int ranks_per_host = 0;                 // 0: all ranks are threads of one process
  std::int64_t clock_uncertainty_ns = 0;  // largest over ranks; 0 for one process
  // Where compute ran and how its spans were timed: "host-clock" (spans taken on the
  // training thread around each kernel call) or "cuda-events" (engine/cuda_trainer.h).
  std::string device = "cpu";
  std::string device_details;  // the GPU(s), for --device cuda
  std::string timing_source = "host-clock";
};

// Called on rank 0's thread after each step with that rank's record.
using StepCallback = std::function<void(const StepRecord&)>;

// Trains one rank over `comm` (any backend). Spans go to `recorder`.
TrainResult train_rank(const TrainConfig& config, Communicator& comm, RankRecorder& recorder,
                       const StepCallback& on_step);

// Runs config.ranks ranks as threads over the local backend and merges their results.
TrainResult train_local(const TrainConfig& config, const StepCallback& on_step = {});

std::uint64_t hash_floats(std::span<const float> values);

// --verify: every rank's parameter hash must equal rank 0's; collective over `comm`.
// Throws RuntimeError naming the first rank that differs, TimeoutError past timeout_ns.
void verify_identical(Communicator& comm, std::uint64_t hash, int step, std::int64_t timeout_ns);

// Spans each lane of a rank's recorder must hold for a whole run of `config`.
std::size_t train_span_capacity(const TrainConfig& config);

// Throws UsageError naming the flag for impossible configurations.
void validate(const TrainConfig& config);

}  // namespace tandem
