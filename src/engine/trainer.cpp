// The rank loop (trainer.h) and the training run around it.
#include "engine/trainer.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <optional>
#include <tuple>

#include "comm/backend_registry.h"
#include "compute/cpu/blas.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/parse.h"
#include "engine/tensor_parallel.h"
#include "model/model_ops.h"
#include "model/token_data.h"

namespace tandem {

static_assert(std::is_trivially_copyable_v<StepRecord>);
static_assert(std::is_trivially_copyable_v<RankMemory>);

std::uint64_t hash_floats(std::span<const float> values) {
  std::uint64_t h = 1469598103934665603ull;
  for (float v : values) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

int micro_batches(const TrainConfig& config) {
  return config.pipeline.micro_batches > 0 ? config.pipeline.micro_batches : config.accumulate;
}

int micro_batch_rows(const TrainConfig& config) {
  return config.pipeline.micro_batches > 0 ? config.batch / config.pipeline.micro_batches
                                           : config.batch;
}

int outer_ranks(const TrainConfig& config) {
  return config.ranks / std::max(1, config.model.tensor);
}

int global_batch(const TrainConfig& config) {
  return micro_batch_rows(config) * micro_batches(config) *
         (outer_ranks(config) / std::max(1, config.pipeline.stages));
}

StagePlan stage_plan(const TrainConfig& config) {
  // With --tensor the stages split the outer ranks (Note [rank order]).
  const std::string ranks_text = config.model.tensor > 1
                                     ? "--ranks " + std::to_string(config.ranks) + " / --tensor " +
                                           std::to_string(config.model.tensor) + " = " +
                                           std::to_string(outer_ranks(config))
                                     : "";
  return plan_stages(config.pipeline, micro_batches(config), outer_ranks(config),
                     ModelLayout(config.model), ranks_text);
}

namespace {

void validate_tensor(const TrainConfig& config) {
  const int t = config.model.tensor;
  if (t < 1 || t > 1024) throw UsageError("--tensor must be 1..1024");
  if (config.model.sequence_parallel && t == 1) {
    throw UsageError(
        "--sequence-parallel: splits tensor parallelism's norm and residual regions "
        "along the tokens; needs --tensor 2 or more");
  }
  if (config.model.tp_overlap && !config.model.sequence_parallel) {
    throw UsageError(
        "--tp-overlap: overlaps sequence parallelism's all-gathers and "
        "reduce-scatters with their products; needs --sequence-parallel");
  }
  if (t == 1) return;
  const std::string flag = "--tensor " + std::to_string(t);
  if (!config.model.is_transformer()) {
    throw UsageError(flag + ": splits transformer blocks (gpt, llama); '" + config.model.text +
                     "' has none");
  }
  if (config.ranks % t != 0) {
    throw UsageError(flag + " does not divide --ranks " + std::to_string(config.ranks) +
                     " (ranks = tensor x pipeline x data)");
  }
  const TransformerShape& s = config.model.transformer;
  if (s.heads % t != 0 || s.hidden % t != 0 || s.vocab % t != 0) {
    throw UsageError(flag + ": " + config.model.describe() +
                     " cannot be split that way (its heads, MLP width and vocabulary must all "
                     "divide by it)");
  }
  if (config.device != Device::kCpu) {
    throw UsageError(flag +
                     ": the split passes run on the CPU so far (--device cpu); the CUDA "
                     "backend has no vocabulary-parallel kernels yet");
  }
  if (config.pipeline.split_auto) {
    throw UsageError(flag + ": --split auto measures an unsplit model; give --split N,N,...");
  }
  const std::int64_t tokens =
      static_cast<std::int64_t>(micro_batch_rows(config)) * config.model.transformer.seq;
  if (config.model.sequence_parallel && tokens % t != 0) {
    throw UsageError("--sequence-parallel: a micro-batch's " + std::to_string(tokens) +
                     " tokens (rows x seq) do not divide among --tensor " + std::to_string(t) +
                     " ranks");
  }
}

void validate_pipeline(const TrainConfig& config) {
  const PipelineOptions& p = config.pipeline;
  if (p.micro_batches != 0) {
    if (p.micro_batches < 1 || p.micro_batches > 4096) {
      throw UsageError("--micro-batches must be 1..4096");
    }
    if (config.accumulate != 1) {
      throw UsageError("--micro-batches and --accumulate both set the micro-batches of a step; "
                       "give one (--micro-batches M cuts --batch into M)");
    }
    if (config.batch % p.micro_batches != 0) {
      throw UsageError("--micro-batches " + std::to_string(p.micro_batches) +
                       " does not divide --batch " + std::to_string(config.batch));
    }
  }
  if (p.split_auto && p.stages == 1) {
    throw UsageError("--split auto: balances pipeline stages; needs --pipeline 2 or more");
  }
  if (p.stages == 1 && p.split.empty() && p.schedule.kind == ScheduleKind::k1F1B) return;
  if (p.stages == 1 && p.schedule.kind != ScheduleKind::k1F1B) {
    throw UsageError("--schedule " + to_string(p.schedule) +
                     ": needs --pipeline 2 or more (one stage runs each micro-batch's forward "
                     "and backward in turn)");
  }
  (void)stage_plan(config);  // names --pipeline, --schedule or --split
  if (p.stages == 1) return;
  if (config.device != Device::kCpu && p.schedule.kind == ScheduleKind::kInterleaved) {
    throw UsageError("--schedule " + to_string(p.schedule) + " with --device " +
                     std::string(to_string(config.device)) +
                     ": NCCL matches point to point in issue order, without tags, and an "
                     "interleaved stage exchanges several chunk boundaries with one neighbour; "
                     "use gpipe or 1f1b there");
  }
  if (config.reducer.plan.strategy.kind == StrategyKind::kChunked) {
    throw UsageError("--strategy " + config.reducer.plan.strategy.to_string() +
                     " cuts the whole flat gradient; a pipeline stage's replicas average only "
                     "its units (use bucketed, layerwise or sequential)");
  }
  if (config.reducer.plan.strategy.sharded()) {
    throw UsageError("--strategy " + config.reducer.plan.strategy.to_string() +
                     " shards a whole replica across ranks; with --pipeline each rank holds a "
                     "stage (docs/PIPELINE.md)");
  }
  if (config.verify) {
    throw UsageError("--verify compares whole replicas across ranks; with --pipeline each rank "
                     "holds one stage");
  }
}

}  // namespace

void validate(const TrainConfig& config, bool runs_here) {
  // A simulated cluster may be larger than what this machine runs.
  const int max_ranks = runs_here ? 1024 : 1 << 20;
  if (config.ranks < 1 || config.ranks > max_ranks) {
    throw UsageError("--ranks must be 1.." + std::to_string(max_ranks));
  }
  if (config.batch < 1 || config.batch > (1 << 20)) throw UsageError("--batch must be 1..1048576");
  if (config.steps < 1) throw UsageError("--steps must be >= 1");
  if (config.accumulate < 1) throw UsageError("--accumulate must be >= 1");
  if (!(config.sgd.lr > 0)) throw UsageError("--lr must be > 0");
  if (config.blas_threads < 1 || config.blas_threads > 1024) {
    throw UsageError("--threads must be 1..1024");
  }
  if (config.timeout_ns <= 0) throw UsageError("--timeout must be > 0");
  if (config.reducer.plan.bucket_cap_bytes <= 0) throw UsageError("--bucket-mb must be > 0");
  if (runs_here && config.device == Device::kCpu) {  // this CPU's, not a simulated device's
    if (const std::string why = cpu_precision_error(config.precision, config.gemm);
        !why.empty()) {
      throw UsageError("--precision " + std::string(to_string(config.precision)) + ": " + why);
    }
  }
  if (config.device != Device::kCpu && config.link.enabled()) {
    throw UsageError(
        "--link: link emulation is for the cpu device's local backend; with "
        "--device " +
        std::string(to_string(config.device)) + " the real interconnect is measured");
  }
  (void)resolve_device_comm(config.device_comm, config.ranks);  // names --device-comm
  if (config.eval_every < 0) throw UsageError("--eval-every must be >= 0");
  if (config.shard.prefetch < 0 || config.shard.prefetch > 64) {
    throw UsageError("--prefetch must be 0..64");
  }
  validate_tensor(config);
  validate_pipeline(config);
  // fp16's dynamic loss scale skips a step where a gradient overflowed: every rank must
  // see the whole gradient to decide alike (docs/GPU.md, "Mixed precision").
  if (config.device == Device::kCuda && config.model.is_transformer() &&
      config.precision == Precision::kFp16 &&
      (config.reducer.plan.strategy.sharded() || config.pipeline.stages > 1)) {
    throw UsageError(
        "--precision fp16: a transformer's dynamic loss scale needs every rank's whole "
        "gradient; with --strategy " +
        config.reducer.plan.strategy.to_string() +
        (config.pipeline.stages > 1 ? " and --pipeline" : "") + " use --precision bf16");
  }
  // A strategy's own updates (docs/REDUCER.md): DDP's buckets (and ZeRO's shards for
  // --overlap-optimizer), no pipelines, and not with fp16's dynamic loss scale, which
  // decides whether to update after every gradient is known.
  struct OwnUpdate {
    const char* flag;
    bool on;
    bool sharded_ok;  // ZeRO's overlapped step
  };
  for (const auto& [flag, on, sharded_ok] :
       {OwnUpdate{"--overlap-optimizer", config.reducer.overlap_optimizer, true},
        OwnUpdate{"--double-buffer", config.reducer.double_buffer, false}}) {
    if (!on) continue;
    if ((config.reducer.plan.strategy.sharded() && !sharded_ok) || config.pipeline.stages > 1) {
      throw UsageError(std::string(flag) +
                       (sharded_ok ? ": updates DDP's buckets or ZeRO's shards, not "
                                   : ": updates DDP's buckets (sequential, layerwise, bucketed, "
                                     "chunked:N), not ") +
                       (config.pipeline.stages > 1
                            ? std::string("a --pipeline run")
                            : "--strategy " + config.reducer.plan.strategy.to_string()));
    }
    if (config.device == Device::kCuda && config.model.is_transformer() &&
        config.precision == Precision::kFp16) {
      throw UsageError(std::string(flag) +
                       ": fp16's dynamic loss scale decides to update only after every "
                       "gradient is known; use --precision bf16");
    }
  }
  if (config.model.layer_drop > 0 || config.reducer.find_unused) {
    const char* flag = config.model.layer_drop > 0 ? "--layer-drop" : "--find-unused";
    if (config.model.layer_drop > 0 && !config.model.is_transformer()) {
      throw UsageError("--layer-drop: skips transformer blocks; '" + config.model.text +
                       "' has none");
    }
    if (config.reducer.plan.strategy.sharded() || config.pipeline.stages > 1) {
      throw UsageError(std::string(flag) +
                       ": DDP strategies only (sequential, layerwise, bucketed, chunked:N), not " +
                       (config.pipeline.stages > 1
                            ? std::string("a --pipeline run")
                            : "--strategy " + config.reducer.plan.strategy.to_string()));
    }
  }
  if (!(config.model.layer_drop >= 0 && config.model.layer_drop <= 1)) {
    throw UsageError("--layer-drop must be 0..1");
  }
  if (config.reducer.overlap_optimizer && config.reducer.double_buffer) {
    throw UsageError(
        "--double-buffer: not with --overlap-optimizer (the delayed update waits "
        "for a whole step's all-reduce, which ran during forward and backward)");
  }
  if (const Compression& compress = config.reducer.compress; compress.enabled()) {
    const Strategy& strategy = config.reducer.plan.strategy;
    if (config.pipeline.stages > 1) {
      throw UsageError("--compress: compresses data-parallel gradients (DDP and sharded "
                       "strategies), not a --pipeline run");
    }
    if (compress.kind == Compression::Kind::kPowerSgd) {
      if (strategy.sharded() || strategy.kind == StrategyKind::kChunked) {
        throw UsageError("--compress " + compress.to_string() +
                         ": needs DDP buckets of whole parameters (sequential, layerwise, "
                         "bucketed), not --strategy " +
                         strategy.to_string() + "; sharded strategies take fp16 or bf16");
      }
      if (config.device == Device::kCuda) {
        throw UsageError("--compress " + compress.to_string() +
                         ": runs on the CPU only (--device cpu); on a GPU use fp16 or bf16");
      }
    }
  }
  if (!config.data_path.empty() && !config.model.is_transformer()) {
    throw UsageError("--data: trains transformer models (gpt, llama and the presets) on text; '" +
                     config.model.text + "' learns its synthetic task");
  }
  try {
    if (runs_here) config.model.check_size();  // a simulation allocates no model
  } catch (const UsageError& e) {
    throw UsageError(std::string("--model: ") + e.what());
  }
  if (!config.data_path.empty()) {
    // Shards are per replica: a pipeline's stages read their replica's (model_config).
    const int replicas = outer_ranks(config) / std::max(1, config.pipeline.stages);
    (void)TokenData::check_file(config.data_path, config.model.transformer.seq,
                                std::max(1, replicas));
  }
  if (!runs_here) return;
  if (config.device == Device::kCpu) {
    check_host_memory(config);
  } else {
    // Note [replica bytes] (model/device_rank_model.h): a floor, per rank.
    const int ranks_here = launched_world().launcher.empty() ? config.ranks : 0;
    check_device_memory({.spec = config.model,
                         .batch = config.batch,
                         .data_batches = config.data_batches,
                         .device = config.device,
                         .precision = config.precision,
                         .data_path = config.data_path},
                        ranks_here);
  }
}

HostMemoryNeed host_memory_need(const TrainConfig& config, int ranks_here) {
  // Note [memory estimate]: what the model, its optimizer and its data allocate
  // (replica_bytes, model/rank_model.h). The communicator reduces gradients in place and
  // the recorder's spans are small, so both are left out: the estimate is a floor, and a
  // run it refuses could never have fit.
  const ReplicaBytes replica = replica_bytes({.spec = config.model,
                                              .batch = config.batch,
                                              .data_batches = config.data_batches,
                                              .data_path = config.data_path});
  HostMemoryNeed need;
  need.state_per_rank = replica.state;
  need.activations_per_rank = replica.working;
  need.ranks = ranks_here;
  // Rank 0 hands its final parameters to the leader: downloaded, then encoded.
  // The recorder allocates every lane's spans before the first step (RankRecorder).
  if (config.record) {
    need.timeline_per_rank = RankRecorder::bytes(train_span_capacity(config));
  }
  need.handoff = 2.0 / 3.0 * replica.state;
  need.total =
      ranks_here * (replica.state + replica.working + need.timeline_per_rank) + need.handoff;
  return need;
}

void check_host_memory(const TrainConfig& config) {
  // In a launcher's job each process holds its own rank; in-process, all of them.
  const int ranks_here = launched_world().launcher.empty() ? config.ranks : 1;
  const HostMemoryNeed need = host_memory_need(config, ranks_here);
  const AvailableMemory available = available_memory();
  if (available.bytes < 0 || need.total <= static_cast<double>(available.bytes)) return;
  throw UsageError(
      "--model " + config.model.text + " with --batch " + std::to_string(config.batch) + " on " +
      std::to_string(ranks_here) + " rank(s) needs at least " + format_bytes(need.total) +
      " of memory (" + std::to_string(static_cast<long long>(need.total)) + " bytes: " +
      std::to_string(ranks_here) + " x (" + format_bytes(need.state_per_rank) +
      " of parameters, gradients and momentum + " + format_bytes(need.activations_per_rank) +
      " of activations and data" +
      (need.timeline_per_rank > 0
           ? " + " + format_bytes(need.timeline_per_rank) + " of timeline spans for " +
                 std::to_string(config.steps) + " steps"
           : std::string()) +
      ") + " + format_bytes(need.handoff) +
      " for the final parameters), but " + format_bytes(static_cast<double>(available.bytes)) +
      " is available (" + available.source + ")");
}

// The hash travels as four 16-bit pieces (exact in fp32). The collective carries no
// step, so metrics leave it out.
void verify_identical(Communicator& comm, std::uint64_t hash, int step) {
  std::vector<float> mine(4);
  std::vector<float> all(4 * static_cast<std::size_t>(comm.size()));
  for (int i = 0; i < 4; ++i)
    mine[static_cast<std::size_t>(i)] = static_cast<float>((hash >> (16 * i)) & 0xffff);
  ending_on_failure(comm, [&] { comm.allgather(mine, all)->synchronize(); });
  for (int r = 1; r < comm.size(); ++r) {
    if (!std::equal(all.begin(), all.begin() + 4, all.begin() + 4 * r)) {
      throw RuntimeError("--verify: after step " + std::to_string(step) + " rank " +
                         std::to_string(r) + " holds different parameters than rank 0");
    }
  }
}

std::size_t train_span_capacity(const TrainConfig& config) {
  const ModelLayout layout(config.model);
  const std::size_t buckets = plan_buckets(layout, config.reducer.plan).size();
  // Pipeline transfers: per micro-batch and chunk, a receive and a send each way, and the
  // waits for them.
  const std::size_t chunks = static_cast<std::size_t>(config.pipeline.schedule.virtual_stages);
  std::size_t per_micro = static_cast<std::size_t>(layout.compute_spans_per_micro_batch()) + 4 +
                          (config.pipeline.stages > 1 ? 8 * chunks : 0);
  std::size_t per_step = buckets + 4;
  if (config.reducer.plan.strategy.sharded()) {
    // fsdp: a gather and its wait per unit read, forward and backward; every stage: a
    // reduce-scatter and a gather per unit and their waits.
    per_micro += 2 * 2 * (static_cast<std::size_t>(layout.units()) + 1);
    per_step += 4 * static_cast<std::size_t>(layout.units());
  }
  return static_cast<std::size_t>(config.steps) *
             (per_micro * static_cast<std::size_t>(micro_batches(config)) + per_step) +
         64;
}

BackendOptions train_backend_options(const TrainConfig& config) {
  return {.ranks = config.ranks,
          .timeout = std::chrono::nanoseconds(config.timeout_ns),
          .local = {.link = config.link}};
}

RunSpec train_run_spec(const TrainConfig& config) {
  return {.ranks = config.ranks,
          .device = config.device,
          .device_comm = config.device_comm,
          .comm = train_backend_options(config),
          .span_capacity_per_lane = train_span_capacity(config),
          .record = config.record,
          .bind = config.bind,
          .threads_per_rank = config.blas_threads,
          .span_names = model_op_names()};
}

namespace {

// A rank's model: `rank` of `ranks` data shards, on device `ordinal`; layout.tensor_rank
// says which tensor-parallel shards it holds.
ModelConfig model_config(const TrainConfig& config, int rank, int ranks, int ordinal,
                         LayoutOptions layout) {
  return {.spec = config.model,
          .batch = micro_batch_rows(config),
          .data_batches = config.data_batches,
          .seed = config.seed,
          .sgd = config.sgd,
          .device = config.device,
          .precision = config.precision,
          .rank = rank,
          .ranks = ranks,
          .data_path = config.data_path,
          .ordinal = ordinal,
          .layout = layout};
}

// Every stage of a pipeline reads its replica's data: the first stage the inputs, the
// last the targets; so do a tensor group's ranks (`outer`: Note [rank order] in
// engine/tensor_parallel.h).
ModelConfig model_config(const TrainConfig& config, const RankEnv& env, const StagePlan& plan,
                         Communicator& outer, int tensor_rank) {
  LayoutOptions layout =
      config.reducer.plan.strategy.sharded() ? sharded_layout(outer.size()) : LayoutOptions{};
  layout.tensor_rank = tensor_rank;
  return model_config(config, plan.replica_of(outer.rank()), plan.replicas, env.ordinal, layout);
}

// The strategy of `config` over `model`; sharded ones take the model's parameters into
// their shards, so they are made after the initial broadcast.
std::unique_ptr<GradSync> make_grad_sync(const TrainConfig& config, const StagePlan& plan,
                                         Communicator& comm, Communicator& control,
                                         RankModel& model) {
  if (plan.shape.stages > 1) {
    // Each stage's replicas average its gradients among themselves.
    std::unique_ptr<Communicator> replicas;
    if (plan.replicas > 1) {
      replicas = comm.split(plan.stage_of(comm.rank()), plan.replica_of(comm.rank()));
      replicas->bind_stream(model.stream());  // a device's buckets follow their backward
    }
    return make_stage_sync(plan, comm, control, model, std::move(replicas), config.reducer);
  }
  const Strategy& strategy = config.reducer.plan.strategy;
  if (!strategy.sharded()) {
    return std::make_unique<Reducer>(comm, model, config.reducer, std::vector<bool>{},
                                     micro_batches(config), config.compute);
  }
  ShardOptions shard = config.shard;
  shard.overlap_optimizer = config.reducer.overlap_optimizer;
  shard.compress = config.reducer.compress;
  return std::make_unique<ShardedSync>(comm, model, strategy.kind, config.reducer.mode, shard,
                                       micro_batches(config), config.compute);
}

// One step of the rank loop (see trainer.h): the passes as the stage's schedule orders
// them (one stage: each micro-batch's forward, then its backward), then the update.
StepRecord run_step(const TrainConfig& config, int step, RankModel& model, GradSync& sync,
                    StageRunner& stage, int rank) {
  StepRecord record{.rank = rank, .step = step};
  record.start_ns = model.begin_step(step);
  sync.begin_step(step);
  const int micro = micro_batches(config);
  stage.run_passes(step, step * micro);
  stage.reduce_tied_grads(step);
  sync.before_optimizer();
  if (config.compute) {
    const bool timed = !sync.times_optimizer();
    if (timed) model.begin_span(Lane::kCompute, SpanKind::kOptimizer);
    sync.optimizer_step(model, 1.0f / static_cast<float>(micro));
    if (timed) model.end_span();
  }
  sync.after_optimizer();
  stage.finish_step();
  sync.end_step();
  const RankModel::StepEnd end = model.end_step();
  record.end_ns = end.end_ns;
  record.loss_scale = end.loss_scale;
  record.skipped_steps = end.skipped_steps;
  record.has_loss = config.compute && stage.has_loss();
  record.loss = record.has_loss ? static_cast<float>(end.loss_sum / micro) : 0.0f;
  return record;
}

// The first stage reports the step's loss, which the last stage computed: a message on
// the control communicator after the step, outside its timing.
void forward_loss_to_first_stage(const StagePlan& plan, Communicator& control, int rank,
                                 StepRecord& record) {
  const int stage = plan.stage_of(rank);
  const int last = plan.stage_of_chunk(static_cast<int>(plan.chunks.size()) - 1);
  if (last == 0 || (stage != 0 && stage != last)) return;
  constexpr int kLossTag = 1 << 20;
  std::vector<float> loss{record.loss};
  if (stage == last) {
    control.send(loss, plan.rank_of(0, plan.replica_of(rank)), kLossTag)->synchronize();
  } else {
    control.recv(loss, plan.rank_of(last, plan.replica_of(rank)), kLossTag)->synchronize();
    record.loss = loss[0];
    record.has_loss = true;
  }
}

// What one rank brings back from train_rank to train() (as bytes: a rank of a process job
// sends it over the control communicator, engine/launch.h). Written and read here, side
// by side, in one order.
struct RankOutcome {
  std::vector<StepRecord> steps;
  std::vector<float> final_params;  // rank 0's, packed; empty elsewhere
  std::string blas;                 // the model's describe()
  std::string device_details;
  std::string timing_source;
  std::string sync;  // the strategy's describe()
  RankMemory memory;
  std::int64_t bytes_per_step = 0;
  std::int64_t uncompressed_bytes_per_step = 0;

  std::string encode() const {
    ByteWriter out;
    out.put_vector(steps);
    out.put_vector(final_params);
    out.put_string(blas);
    out.put_string(device_details);
    out.put_string(timing_source);
    out.put_string(sync);
    out.put_vector(std::vector<RankMemory>{memory});
    out.put_vector(std::vector<std::int64_t>{bytes_per_step, uncompressed_bytes_per_step});
    return out.take();
  }
  static RankOutcome decode(const std::string& bytes) {
    ByteReader in(bytes);
    RankOutcome r;
    r.steps = in.get_vector<StepRecord>();
    r.final_params = in.get_vector<float>();
    r.blas = in.get_string();
    r.device_details = in.get_string();
    r.timing_source = in.get_string();
    r.sync = in.get_string();
    r.memory = in.get_vector<RankMemory>().at(0);
    const std::vector<std::int64_t> moved = in.get_vector<std::int64_t>();
    r.bytes_per_step = moved.at(0);
    r.uncompressed_bytes_per_step = moved.at(1);
    return r;
  }
};

}  // namespace

std::string train_rank(const TrainConfig& config, RankEnv& env, const StepCallback& on_step) {
  const int rank = env.comm.rank();
  const StagePlan plan = stage_plan(config);
  // With --tensor, everything below runs over this rank's tensor-parallel position (Note
  // [rank order]): `comm` and `control` are its outer communicators.
  TensorParallel tensor(config.model.tensor, env.comm, env.control);
  Communicator& comm = tensor.outer();
  Communicator& control = tensor.outer_control();
  std::unique_ptr<RankModel> model =
      make_rank_model(model_config(config, env, plan, comm, tensor.rank()), env.recorder);
  comm.bind_stream(model->stream());
  tensor.attach(*model);
  std::unique_ptr<GradSync> sync;
  std::unique_ptr<StageRunner> stage;

  std::vector<StepRecord> steps;
  std::vector<float> final_params;
  std::int64_t setup_peak_rss = -1, steps_peak_rss = -1, device_peak = -1;
  // Note [one owner of shutdown]: the model's and the strategy's buffers, which
  // collectives read and write, outlive this block; a failure ends this rank's collectives
  // (abort, then drain) before they die, so no communication thread touches freed memory.
  // The launcher then aborts the peers with the same error.
  try {
    // Every rank starts from rank 0's parameters, as DDP does.
    if (comm.size() > 1) {
      comm.broadcast(model->params(), 0, {.kind = SpanKind::kBroadcast})->synchronize();
    }
    sync = make_grad_sync(config, plan, comm, control, *model);
    stage = std::make_unique<StageRunner>(
        plan,
        StageRunner::Options{.micro_batches = micro_batches(config),
                             .mode = config.reducer.mode,
                             .compute = config.compute,
                             .find_unused = config.reducer.find_unused},
        comm, *model, *sync, &env.recorder);
    // Note [peak RSS]: the process's peak so far covers building the model (every rank
    // initializes a whole replica, then a sharded strategy keeps its shards); it is reset
    // here so that the peak read after the last step is the steps' own. In-process ranks
    // share the process and each resets it as it starts: a step's peak recurs every step,
    // so what a rank's reset cuts short of another's first step is measured again later.
    setup_peak_rss = peak_rss_bytes();
    const bool reset = reset_peak_rss();
    model->reset_device_peak();
    for (int step = 0; step < config.steps; ++step) {
      StepRecord record = run_step(config, step, *model, *sync, *stage, rank);
      // The steps' own: a held-out pass or --verify gathers every unit of fsdp.
      device_peak = std::max(device_peak, model->device_peak_bytes());
      if (config.compute && plan.shape.stages > 1) {
        forward_loss_to_first_stage(plan, control, comm.rank(), record);
      }
      // Every rank evaluates (the replicas are equal, so are their losses): the ranks
      // stay in step, and no rank waits for rank 0's evaluation inside the next step.
      const bool last = step + 1 == config.steps;
      // A pipeline stage holds some units: no held-out pass (docs/PIPELINE.md, Limits).
      if (config.compute && plan.shape.stages == 1 &&
          (last || (config.eval_every > 0 && (step + 1) % config.eval_every == 0))) {
        if (const std::optional<double> val = sync->validation_loss(*model)) {
          record.val_loss = static_cast<float>(*val);
          record.has_val_loss = true;
        }
      }
      if (config.verify) {
        record.param_hash = hash_floats(sync->full_params(*model, /*copy=*/true));
        // Without communication (the compute-only scenario) replicas differ by design and
        // nothing may be sent, so only the hash is kept.
        if (control.size() > 1 && config.reducer.mode != CommMode::kOff) {
          verify_identical(control, record.param_hash, step);
        }
      }
      model->reset_device_peak();
      steps.push_back(record);
      if (rank == 0 && on_step) on_step(record);
    }
    steps_peak_rss = reset ? peak_rss_bytes() : -1;
    // A collective for fsdp: every rank gathers, rank 0 alone keeps a copy.
    // The first replica's (its tensor group's shards, joined).
    const bool first = comm.rank() == 0;
    std::vector<float> full = sync->full_params(*model, /*copy=*/first);
    if (first) {
      final_params = tensor.gather_params(model->layout(), model->layout().packed(std::move(full)),
                                          /*keep=*/rank == 0);
    }
    tensor.close();
  } catch (const std::exception& e) {
    // The world's abort reaches the tensor groups and outer communicators split from it.
    end_in_flight(env.comm, e.what());
    if (&env.control != &env.comm) end_in_flight(env.control, e.what());
    tensor.end_in_flight(e.what());
    throw;
  }

  RankMemory memory{.rank = rank,
                    .state = sync->state_bytes(),
                    .peak_rss_bytes = std::max(setup_peak_rss, peak_rss_bytes()),
                    .steps_peak_rss_bytes = steps_peak_rss,
                    .device_peak_bytes = device_peak,
                    .micro_batches_in_flight = stage->slots()};
  memory.state.activations = stage->activation_bytes();
  return RankOutcome{
      .steps = std::move(steps),
      .final_params = std::move(final_params),
      .blas = model->describe(),
      .device_details = model->device_details(),
      .timing_source = model->timing_source(),
      .sync = sync->describe(),
      .memory = memory,
      .bytes_per_step = sync->bytes_per_step() + stage->bytes_per_step() + tensor.bytes_per_step(),
      .uncompressed_bytes_per_step =
          sync->uncompressed_bytes_per_step() + stage->bytes_per_step() + tensor.bytes_per_step()}
      .encode();
}

void configure_cpu_gemm(const TrainConfig& config) {
  set_blas_threads(config.blas_threads);
  set_gemm_library(config.gemm);
  set_gemm_precision(config.precision);
}

std::vector<double> measure_unit_seconds(const TrainConfig& config, int passes) {
  TANDEM_CHECK(passes >= 1);
  constexpr int kWarmup = 2;
  if (config.device == Device::kCpu) configure_cpu_gemm(config);
  const ModelLayout layout(config.model);
  const int units = layout.units();
  RankRecorder recorder(0, static_cast<std::size_t>(64 * units + 64));
  const std::unique_ptr<RankModel> model = make_rank_model(
      model_config(config, /*rank=*/0,
                   std::max(1, outer_ranks(config) / std::max(1, config.pipeline.stages)),
                   /*ordinal=*/0, LayoutOptions{}),
      recorder);
  std::vector<std::vector<double>> seconds(static_cast<std::size_t>(units));
  for (int pass = 0; pass < kWarmup + passes; ++pass) {
    recorder.clear();
    model->begin_step(pass);
    model->set_micro_batch(pass);
    for (int u = 0; u < units; ++u) model->forward_unit(u);
    model->forward_loss();
    model->backward_loss();
    for (int u = units - 1; u >= 0; --u) model->backward_unit(u);
    (void)model->end_step();  // a device's spans are recorded here
    model->zero_grad();
    if (pass < kWarmup) continue;
    std::vector<double> cost(static_cast<std::size_t>(units), 0.0);
    for (const Span& s : recorder.collect()) {
      if (s.lane != Lane::kCompute || s.tag < 0 ||
          (s.kind != SpanKind::kForward && s.kind != SpanKind::kBackward)) {
        continue;
      }
      // The loss's spans carry the tag after the last unit: the last stage runs them.
      cost[static_cast<std::size_t>(std::min(s.tag, units - 1))] +=
          static_cast<double>(s.end_ns - s.start_ns) * 1e-9;
    }
    for (int u = 0; u < units; ++u) {
      seconds[static_cast<std::size_t>(u)].push_back(cost[static_cast<std::size_t>(u)]);
    }
  }
  std::vector<double> out;
  for (std::vector<double>& s : seconds) {
    std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(s.size() / 2), s.end());
    out.push_back(s[s.size() / 2]);
  }
  return out;
}

void refuse_split_auto_in_process_jobs(bool split_auto, const std::string& backend) {
  if (split_auto && backend != "local") {
    throw UsageError("--split auto: measures in one process; under " + backend +
                     " give the split a local run printed (--split N,N,...)");
  }
}

std::vector<int> measured_split(const TrainConfig& config) {
  const std::size_t chunks = stage_plan(config).chunks.size();
  return balance_units(measure_unit_seconds(config), static_cast<int>(chunks));
}

TrainResult train(const TrainConfig& given, Job& job, const StepCallback& on_step) {
  validate(given);
  TrainConfig config = given;
  if (config.pipeline.split_auto && config.pipeline.split.empty()) {
    // Every rank must hold the same split: measured once, before any rank starts.
    refuse_split_auto_in_process_jobs(true, job.in_process() ? "local" : "mpi");
    config.pipeline.split = measured_split(config);
  }
  if (config.device == Device::kCpu) configure_cpu_gemm(config);
  const RunResult run = job.run(train_run_spec(config),
                                [&](RankEnv& env) { return train_rank(config, env, on_step); });

  TrainResult result;
  result.leader = run.leader;
  result.buckets = plan_buckets(ModelLayout(config.model), config.reducer.plan);
  result.timeline = run.timeline;
  result.spans_dropped = run.spans_dropped;
  result.backend = run.backend;
  result.backend_details = run.backend_details;
  result.binding = run.binding;
  result.hosts = run.hosts;
  result.ranks_per_host = run.ranks_per_host;
  result.clock_uncertainty_ns = run.clock_uncertainty_ns;
  result.clock_offset_ns = run.clock_offset_ns;
  result.device = std::string(to_string(config.device));
  if (config.pipeline.stages > 1) result.pipeline = stage_plan(config).describe();
  for (std::size_t r = 0; r < run.payloads.size(); ++r) {
    RankOutcome rank = RankOutcome::decode(run.payloads[r]);
    result.steps.insert(result.steps.end(), rank.steps.begin(), rank.steps.end());
    result.memory.push_back(rank.memory);
    if (r == 0) {
      result.bytes_per_step = rank.bytes_per_step;
      result.uncompressed_bytes_per_step = rank.uncompressed_bytes_per_step;
      result.sync = std::move(rank.sync);
      result.final_params = std::move(rank.final_params);
      result.blas = std::move(rank.blas);
      result.device_details = std::move(rank.device_details);
      result.timing_source = std::move(rank.timing_source);
    }
  }
  std::sort(result.steps.begin(), result.steps.end(), [](const auto& a, const auto& b) {
    return std::tie(a.step, a.rank) < std::tie(b.step, b.rank);
  });
  return result;
}

TrainResult train_local(const TrainConfig& config, const StepCallback& on_step) {
  Job job("local", train_backend_options(config));
  return train(config, job, on_step);
}

}  // namespace tandem
