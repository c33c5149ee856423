// Data-parallel training: one rank loop for every device and backend.
//
// One step (iteration) on one rank, as train_rank runs it over a RankModel
// (model/rank_model.h) and a GradSync strategy (ddp/grad_sync.h):
//   begin_step; for each of `accumulate` micro-batches: forward unit by unit, loss,
//   backward unit by unit (the strategy's hooks before each unit's forward and after
//   each unit's backward); before_optimizer (DDP: the rest of the all-reduces, and the
//   waits); SGD and zero-grad; after_optimizer; end_step (the host waits for the step's
//   collectives, then for the device).
// The same loop serves every scenario of `tandem characterize`: communication off
// (compute-only), deferred to after backward (sequential), or without compute (comm-only:
// the same hooks in the same order with no math between them).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/link_model.h"
#include "compute/cpu/blas.h"
#include "compute/precision.h"
#include "ddp/reducer.h"
#include "ddp/sharded.h"
#include "engine/launch.h"
#include "engine/pipeline.h"
#include "model/rank_model.h"
#include "timeline/recorder.h"

namespace tandem {

struct TrainConfig {
  ModelSpec model;  // model.tensor: --tensor, the tensor-parallel ranks of each layer
  int ranks = 2;    // tensor x pipeline stages x data-parallel replicas
  int batch = 64;  // per rank, as in DDP
  int steps = 50;
  int accumulate = 1;  // micro-batches per synchronization (of `batch` rows each)
  // Pipeline stages, their schedule and micro-batches (engine/pipeline.h); the default is
  // one stage.
  PipelineOptions pipeline{};
  SgdOptions sgd{};
  ReducerOptions reducer{};  // the strategy, its bucket plan and the scenario's CommMode
  ShardOptions shard{};      // zero1, zero2, fsdp (ddp/sharded.h)
  LinkModel link{};
  std::int64_t timeout_ns = 300'000'000'000;  // a collective not done by then fails the run
  std::uint64_t seed = 1;
  int blas_threads = 1;  // per rank
  bool bind = true;      // in-process ranks bound to CPUs of their own (RunSpec::bind)
  int data_batches = 8;  // distinct batches per rank's shard, cycled
  std::string data_path;  // transformers: train on this file's bytes (model/token_data.h)
  int eval_every = 0;     // with held-out data: the validation loss every N steps (0: last only)
  bool compute = true;   // false: the comm-only scenario (same collectives, no math)
  bool record = true;    // the timeline; off only to measure its own cost
  bool verify = false;   // hash parameters after every step and compare across ranks
  // Where the math runs; devices besides the CPU register in model/rank_model.h.
  Device device = Device::kCpu;
  // GEMM precision: the CPU runs fp32 or bf16 (where it has AVX512-BF16 or AMX), a GPU
  // also tf32 and fp16.
  Precision precision = Precision::kFp32;
  GemmLibrary gemm = default_gemm_library();  // the CPU's GEMM library (compute/cpu/blas.h)
  std::string device_comm = "auto";           // device collectives: auto, nccl, shared or emulated
};

// Note [--split auto]: each unit's forward + backward time (seconds; the loss counted in
// the last unit), the median of `passes` passes after two warm-up ones over one
// micro-batch, on one model of the whole run on this process's first device (rank 0's
// data, nothing else running). What --split auto balances the stages by.
std::vector<double> measure_unit_seconds(const TrainConfig& config, int passes = 5);
// --split auto's units per model chunk: the measured times balanced over the run's chunks
// (balance_units). Every rank must hold the same split, so it is measured once, in this
// process, before any rank starts; a caller that reports the split resolves it first
// (train() does for whoever did not). Under a process backend ("mpi") --split auto is
// refused with one line (refuse_split_auto_in_process_jobs).
std::vector<int> measured_split(const TrainConfig& config);
void refuse_split_auto_in_process_jobs(bool split_auto, const std::string& backend);

// One rank's step, as printed and written to steps.csv.
struct StepRecord {
  int rank = 0;
  int step = 0;
  float loss = 0;                // mean over the step's micro-batches, where has_loss
  bool has_loss = true;          // false: a pipeline stage without the loss, or comm-only
  std::int64_t start_ns = 0;     // first forward
  std::int64_t end_ns = 0;       // optimizer done
  std::uint64_t param_hash = 0;  // with verify: FNV-1a of the parameters' bits
  float val_loss = 0;            // the held-out loss after this step, where has_val_loss
  bool has_val_loss = false;
  float loss_scale = 0;  // fp16 on cuda: the dynamic loss scale after this step (0: none)
  int skipped_steps = 0;  // and the steps it skipped so far (a gradient overflowed)
};

// What one rank's training state cost, and its process's peak resident set.
struct RankMemory {
  int rank = 0;
  StateBytes state{};
  // The process's (shared by its ranks); -1: unknown. Over the whole run, and over the
  // training steps alone (after the model was built; Note [peak RSS] in trainer.cpp).
  std::int64_t peak_rss_bytes = -1;
  std::int64_t steps_peak_rss_bytes = -1;
  // The rank's device: its memory in use at the peak of the steps, as the driver counts
  // it (RankModel::device_peak_bytes); -1: no device (the CPU).
  std::int64_t device_peak_bytes = -1;
  int micro_batches_in_flight = 1;  // at most, at once (a pipeline stage's slots)
};

struct TrainResult {
  std::vector<StepRecord> steps;  // every rank's, sorted by (step, rank)
  std::vector<RankMemory> memory;  // per rank, in rank order
  Timeline timeline;
  std::vector<Bucket> buckets;      // the plan every rank used
  std::vector<float> final_params;  // rank 0's, in the packed layout (layout.h)
  std::string sync;                 // the strategy's describe() line
  std::string pipeline;             // StagePlan::describe(), with pipeline stages
  std::int64_t bytes_per_step = 0;  // rank 0's collectives in the last step (GradSync)
  // What they would have moved without --compress.
  std::int64_t uncompressed_bytes_per_step = 0;
  std::size_t spans_dropped = 0;
  std::string blas;  // BLAS in use (threads included), or cuBLAS and the GEMM precision
  // The communicator backend and, for process jobs (mpi), the job's shape and how well
  // the ranks' clocks were aligned to rank 0's (engine/launch.h).
  std::string backend = "local";
  std::string backend_details;
  std::string binding;  // where the ranks' threads ran (RunPlacement::binding)
  int hosts = 1;
  int ranks_per_host = 0;                 // 0: all ranks are threads of one process
  std::int64_t clock_uncertainty_ns = 0;  // largest over ranks; 0 for one process
  std::int64_t clock_offset_ns = 0;       // largest |offset| from rank 0's clock (launch.h)
  // Where compute ran and how its spans were timed: "host-clock" (spans taken on the
  // training thread around each kernel call) or "cuda-events".
  std::string device = "cpu";
  std::string device_details;  // the GPU(s), for --device cuda
  std::string timing_source = "host-clock";
  bool leader = true;  // false on the other processes of a job: only their own steps
};

// Micro-batches per step: --micro-batches (the batch cut into them) or --accumulate.
int micro_batches(const TrainConfig& config);
// Rows of one micro-batch: batch / micro-batches with --micro-batches, else batch.
int micro_batch_rows(const TrainConfig& config);
// The ranks of one tensor-parallel position (pipeline stages x replicas): --ranks
// divided by --tensor (Note [rank order] in engine/tensor_parallel.h).
int outer_ranks(const TrainConfig& config);
// Samples per step over every replica.
int global_batch(const TrainConfig& config);
// The run's pipeline stages (one stage without --pipeline); throws UsageError.
StagePlan stage_plan(const TrainConfig& config);

// Called on rank 0's thread after each step with that rank's record.
using StepCallback = std::function<void(const StepRecord&)>;

// Trains every rank of `job` (threads of this process, or this process's rank of a
// launcher's job). config.ranks must equal the job's size for process jobs. On the
// leader the result holds every rank's steps and spans; elsewhere (leader false) only
// the run's description.
TrainResult train(const TrainConfig& config, Job& job, const StepCallback& on_step = {});
// The CPU's GEMM settings of `config` (library, precision, threads per rank), process-wide;
// train() applies them, and headers call it first to describe what will run.
void configure_cpu_gemm(const TrainConfig& config);
// train() on a job of threads of this process (the local backend).
TrainResult train_local(const TrainConfig& config, const StepCallback& on_step = {});

// The rank loop on one rank of a run; returns the rank's results encoded for the leader.
std::string train_rank(const TrainConfig& config, RankEnv& env, const StepCallback& on_step);

// The RunSpec of a training run of `config`.
RunSpec train_run_spec(const TrainConfig& config);
// The BackendOptions of `config` (timeout, link).
BackendOptions train_backend_options(const TrainConfig& config);

std::uint64_t hash_floats(std::span<const float> values);

// --verify: every rank's parameter hash must equal rank 0's; collective over `comm` (host
// memory). Throws RuntimeError naming the first rank that differs.
void verify_identical(Communicator& comm, std::uint64_t hash, int step);

// Spans each lane of a rank's recorder must hold for a whole run of `config`.
std::size_t train_span_capacity(const TrainConfig& config);

// Throws UsageError naming the flag for impossible configurations, and, for a run on
// this machine (`runs_here`; not a simulation's), one whose memory would not fit
// (check_host_memory, check_device_memory).
void validate(const TrainConfig& config, bool runs_here = true);

// The host memory a run allocates in this process, in bytes (Note [memory estimate] in
// trainer.cpp): per rank the model's state and its activations and data, for every rank
// of the process, plus rank 0's copy of the final parameters.
struct HostMemoryNeed {
  double state_per_rank = 0;        // parameters, gradients, momentum
  double activations_per_rank = 0;  // activations, gradients of activations, the data shard
  double timeline_per_rank = 0;     // the recorder's span buffers, sized up front by --steps
  int ranks = 0;                    // ranks in this process
  double handoff = 0;               // rank 0's final parameters, downloaded and encoded
  double total = 0;                 // ranks x (state + activations + timeline) + handoff
};
HostMemoryNeed host_memory_need(const TrainConfig& config, int ranks_here);
// Throws UsageError with the bytes needed when a run of `config` needs more memory than
// this machine has available (core/memory.h); checked before anything is allocated.
void check_host_memory(const TrainConfig& config);

}  // namespace tandem
