#include "engine/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

#include "compute/cpu/blas.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"
#include "engine/local_launch.h"

namespace tandem {

std::uint64_t hash_floats(std::span<const float> values) {
  std::uint64_t h = 1469598103934665603ull;
  for (float v : values) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    h = (h ^ bits) * 1099511628211ull;
  }
  return h;
}

void validate(const TrainConfig& config) {
  if (config.ranks < 1 || config.ranks > 1024) throw UsageError("--ranks must be 1..1024");
  if (config.batch < 1 || config.batch > (1 << 20)) throw UsageError("--batch must be 1..1048576");
  if (config.steps < 1) throw UsageError("--steps must be >= 1");
  if (config.accumulate < 1) throw UsageError("--accumulate must be >= 1");
  if (!(config.sgd.lr > 0)) throw UsageError("--lr must be > 0");
  if (config.blas_threads < 1 || config.blas_threads > 1024) {
    throw UsageError("--threads must be 1..1024");
  }
  if (config.reducer.plan.bucket_cap_bytes <= 0) throw UsageError("--bucket-mb must be > 0");
  if (config.device == Device::kCpu && config.precision != Precision::kFp32) {
    throw UsageError("--precision " + std::string(to_string(config.precision)) +
                     ": the cpu device computes in fp32 only (use --device cuda)");
  }
  if (config.device != Device::kCpu && config.link.enabled()) {
    throw UsageError(
        "--link: link emulation is for the cpu device's local backend; with "
        "--device " +
        std::string(to_string(config.device)) + " the real interconnect is measured");
  }
  if (config.device_comm != "auto" && config.device_comm != "nccl" &&
      config.device_comm != "emulated") {
    throw UsageError("--device-comm must be auto, nccl or emulated (got '" + config.device_comm +
                     "')");
  }
  // Activations: about 4 arrays of batch x widest layer per Linear layer.
  const double activation_bytes = 4.0 * config.batch *
                                  std::max(config.model.width, config.model.input) *
                                  config.model.depth * sizeof(float);
  if (activation_bytes * config.ranks > 16e9) {
    throw UsageError("--batch " + std::to_string(config.batch) + " with --model " +
                     config.model.text + " needs more than 16 GB of activations");
  }
}

namespace {

std::vector<GradParam> grad_params(const Model& model) {
  std::vector<GradParam> out;
  for (const auto& p : model.params()) out.push_back({p.layer, p.offset, p.numel});
  return out;
}

std::size_t span_capacity(const TrainConfig& config, const Model& model, std::size_t buckets) {
  const std::size_t per_micro = 2 * static_cast<std::size_t>(model.layer_count()) + 4;
  return static_cast<std::size_t>(config.steps) * (per_micro * config.accumulate + buckets + 4) +
         64;
}

// Waits for a Work the training loop cannot go on without, at most `timeout_ns`.
void wait_within(Communicator& comm, Work& work, std::int64_t timeout_ns) {
  const std::int64_t start = now_ns();
  if (!work.wait_for(std::chrono::nanoseconds(timeout_ns))) {
    throw TimeoutError("rank " + std::to_string(comm.rank()) + ": " + work.info().describe() +
                       " not complete after " +
                       format_duration_ns(static_cast<double>(now_ns() - start)));
  }
}

}  // namespace

// The hash travels as four 16-bit pieces (exact in fp32). The collective carries no
// step, so metrics leave it out.
void verify_identical(Communicator& comm, std::uint64_t hash, int step, std::int64_t timeout_ns) {
  std::vector<float> mine(4);
  for (int i = 0; i < 4; ++i) mine[i] = static_cast<float>((hash >> (16 * i)) & 0xffff);
  std::vector<float> all(4 * static_cast<std::size_t>(comm.size()));
  WorkPtr work = comm.allgather(mine, all);
  wait_within(comm, *work, timeout_ns);
  work->wait();
  for (int r = 1; r < comm.size(); ++r) {
    if (!std::equal(all.begin(), all.begin() + 4, all.begin() + 4 * r)) {
      throw RuntimeError("--verify: after step " + std::to_string(step) + " rank " +
                         std::to_string(r) + " holds different parameters than rank 0");
    }
  }
}

std::size_t train_span_capacity(const TrainConfig& config) {
  const Model probe(config.model, 1, config.seed);
  const auto plan =
      plan_buckets(grad_params(probe), probe.flat_grads().size(), config.reducer.plan);
  return span_capacity(config, probe, plan.size());
}

TrainResult train_rank(const TrainConfig& config, Communicator& comm, RankRecorder& recorder,
                       const StepCallback& on_step) {
  const int rank = comm.rank();
  Model model(config.model, config.batch, config.seed);
  SyntheticDataset data(config.model.input, config.model.classes, config.batch, config.data_batches,
                        config.seed, rank);
  Sgd sgd(config.sgd, model.flat_params().size());
  Reducer reducer(grad_params(model), model.flat_grads(), comm, recorder, config.reducer);

  // Every rank starts from rank 0's parameters, as DDP does.
  if (comm.size() > 1) {
    WorkPtr work = comm.broadcast(model.flat_params(), 0, {.kind = SpanKind::kBroadcast});
    wait_within(comm, *work, config.reducer.timeout_ns);
    work->wait();
  }

  TrainResult result;
  result.buckets = reducer.buckets();
  const float grad_scale = 1.0f / static_cast<float>(config.accumulate);
  for (int step = 0; step < config.steps; ++step) {
    StepRecord record{.rank = rank, .step = step, .start_ns = now_ns()};
    if (!config.compute) {
      // Comm-only: the same units, launched in the same order, with no math between.
      reducer.prepare(step);
      for (int layer = model.layer_count() - 1; layer >= 0; --layer)
        reducer.mark_layer_ready(layer);
      reducer.finish();
      record.end_ns = now_ns();
      result.steps.push_back(record);
      if (rank == 0 && on_step) on_step(record);
      continue;
    }
    double loss_sum = 0;
    for (int micro = 0; micro < config.accumulate; ++micro) {
      const bool sync = micro + 1 == config.accumulate;
      if (sync) reducer.prepare(step);
      loss_sum += model.forward(data.batch(step * config.accumulate + micro), recorder, step);
      model.backward(recorder, step, [&](int layer) {
        if (sync) reducer.mark_layer_ready(layer);
      });
    }
    reducer.finish();
    {
      ScopedSpan span(recorder, Lane::kCompute, SpanKind::kOptimizer, step);
      sgd.step(model.flat_params(), model.flat_grads(), grad_scale);
      model.zero_grad();
    }
    record.end_ns = now_ns();
    record.loss = static_cast<float>(loss_sum / config.accumulate);
    if (config.verify) {
      record.param_hash = hash_floats(model.flat_params());
      // Without communication (the compute-only scenario) replicas differ by design and
      // nothing may be sent, so only the hash is kept.
      if (comm.size() > 1 && config.reducer.communicate) {
        verify_identical(comm, record.param_hash, step, config.reducer.timeout_ns);
      }
    }
    result.steps.push_back(record);
    if (rank == 0 && on_step) on_step(record);
  }
  if (rank == 0) {
    result.final_params.assign(model.flat_params().begin(), model.flat_params().end());
  }
  return result;
}

TrainResult train_local(const TrainConfig& config, const StepCallback& on_step) {
  validate(config);
  set_blas_threads(config.blas_threads);

  // The plan is needed up front only to size the span buffers.
  const Model probe(config.model, 1, config.seed);
  const auto plan =
      plan_buckets(grad_params(probe), probe.flat_grads().size(), config.reducer.plan);

  std::vector<TrainResult> results(config.ranks);
  LocalRunTimeline run =
      run_local_ranks({.ranks = config.ranks,
                       .link = config.link,
                       .span_capacity_per_lane = span_capacity(config, probe, plan.size()),
                       .record = config.record},
                      [&](Communicator& comm, RankRecorder& recorder) {
                        results[comm.rank()] = train_rank(config, comm, recorder, on_step);
                      });

  TrainResult merged;
  merged.buckets = std::move(results[0].buckets);
  merged.final_params = std::move(results[0].final_params);
  merged.timeline = std::move(run.timeline);
  merged.spans_dropped = run.spans_dropped;
  for (const auto& r : results) {
    merged.steps.insert(merged.steps.end(), r.steps.begin(), r.steps.end());
  }
  std::sort(merged.steps.begin(), merged.steps.end(), [](const auto& a, const auto& b) {
    return std::tie(a.step, a.rank) < std::tie(b.step, b.rank);
  });
  merged.blas = blas_description();
  return merged;
}

}  // namespace tandem
