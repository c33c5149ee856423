// The CUDA trainer (cuda_trainer.h) and its registration as the --device cuda trainer.
// Host code only; it is a .cu file so that it builds only in CUDA builds (the engine's
// C++ sources are globbed as *.cpp).
#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

#include "comm/device/device_backends.h"
#include "compute/cuda/cuda_check.h"
#include "compute/cuda/cuda_model.h"
#include "compute/cuda/device_buffer.h"
#include "compute/cuda/event_timer.h"
#include "compute/cuda/gemm.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"
#include "ddp/launch_schedule.h"
#include "engine/cuda_trainer.h"
#include "engine/device_trainer.h"
#include "engine/process_launch.h"

namespace tandem {
namespace {

std::vector<GradParam> grad_params(const std::vector<ParamInfo>& params) {
  std::vector<GradParam> out;
  for (const auto& p : params) out.push_back({p.layer, p.offset, p.numel});
  return out;
}

DeviceCommOptions comm_options(const TrainConfig& config) {
  DeviceCommOptions options;
  options.backend = config.device_comm;
  const std::int64_t seconds = (config.reducer.timeout_ns + 999'999'999) / 1'000'000'000;
  options.timeout = std::chrono::seconds(std::max<std::int64_t>(1, seconds));
  return options;
}

// The rank's synthetic shard: generated on the host by the CPU engine's code (so both
// engines train on the same samples) and copied to the device once, before step 0.
class DeviceDataset {
 public:
  DeviceDataset(const TrainConfig& config, int rank, cudaStream_t stream)
      : rows_(config.batch), batches_(config.data_batches), input_(config.model.input) {
    const SyntheticDataset data(config.model.input, config.model.classes, config.batch,
                                config.data_batches, config.seed, rank);
    const std::size_t rows = static_cast<std::size_t>(rows_);
    const std::size_t batches = static_cast<std::size_t>(batches_);
    x_ = cuda::DeviceBuffer<float>(batches * rows * input_);
    y_ = cuda::DeviceBuffer<std::int32_t>(batches * rows);
    for (int i = 0; i < batches_; ++i) {
      const Batch batch = data.batch(i);
      const auto first = static_cast<std::size_t>(i) * rows;
      x_.upload(batch.x, stream, first * input_);
      y_.upload(batch.y, stream, first);
    }
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));  // `data` is freed on return
  }

  // Batch (index mod batches), as SyntheticDataset::batch.
  cuda::DeviceBatch batch(int index) const {
    const int i = ((index % batches_) + batches_) % batches_;
    const std::size_t first = static_cast<std::size_t>(i) * static_cast<std::size_t>(rows_);
    return {.x = x_.data() + first * input_, .y = y_.data() + first, .rows = rows_};
  }

 private:
  int rows_;
  int batches_;
  std::size_t input_;
  cuda::DeviceBuffer<float> x_;
  cuda::DeviceBuffer<std::int32_t> y_;
};

void wait_within(int rank, Work& work, std::int64_t timeout_ns) {
  const std::int64_t start = now_ns();
  if (!work.wait_for(std::chrono::nanoseconds(timeout_ns))) {
    throw TimeoutError("rank " + std::to_string(rank) + ": " + work.info().describe() +
                       " not complete after " +
                       format_duration_ns(static_cast<double>(now_ns() - start)));
  }
  work.wait();  // rethrows a stored error
}

// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)", or each distinct device of the ranks.
std::string describe_devices(const std::vector<int>& devices) {
  std::string out;
  for (int device : std::set<int>(devices.begin(), devices.end())) {
    if (!out.empty()) out += "; ";
    out += "device " + std::to_string(device) + ": " + cuda::describe_device(device);
  }
  return out;
}

}  // namespace

std::string cuda_unavailable_reason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear the error so later calls do not report it again
    return std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorName(status) +
           ": " + cudaGetErrorString(status) + ")";
  }
  if (count == 0) return "no CUDA device found (cudaGetDeviceCount returned 0)";
  return "";
}

TrainResult train_rank_cuda(const TrainConfig& config, DeviceCommunicator& comm,
                            RankRecorder& recorder, const StepCallback& on_step,
                            Communicator* host) {
  const int rank = comm.rank();
  cuda::set_device(comm.device());
  cuda::Stream stream;
  const cudaStream_t s = stream.get();
  cuda::CudaModel model(config.model, config.batch, config.seed, config.precision, s);
  cuda::CudaSgd sgd(config.sgd, model.numel(), s);
  const DeviceDataset data(config, rank, s);
  cuda::EventTimer timer(config.record);

  // The CPU reducer's plan over the same flat layout: every rank, and both engines,
  // build the same buckets in the same order.
  const std::vector<GradParam> params = grad_params(model.params());
  const std::vector<Bucket> buckets = plan_buckets(params, model.numel(), config.reducer.plan);
  LaunchSchedule schedule(params, buckets);
  std::vector<cuda::Event> ready(buckets.size());  // per bucket, recorded once per step
  std::vector<DeviceWorkPtr> works(buckets.size());
  const bool overlaps = config.reducer.communicate && !config.reducer.defer &&
                        config.reducer.plan.strategy.kind != StrategyKind::kSequential;
  int step = 0;

  // Enqueues bucket b's all-reduce after everything the compute stream has been given
  // so far (its gradients among it). The host does not wait.
  const auto launch = [&](int b) {
    const Bucket& bucket = buckets[b];
    if (!config.reducer.communicate || bucket.end == bucket.begin) return;
    ready[b].record(s);
    const OpInfo info{
        .kind = SpanKind::kAllreduce, .bytes = bucket.bytes(), .step = step, .tag = bucket.index};
    works[b] = comm.allreduce(model.flat_grads() + bucket.begin, bucket.end - bucket.begin,
                              DeviceDtype::kFloat32, ReduceOp::kAverage, ready[b].get(), info);
  };
  const auto on_layer_ready = [&](int layer) {
    schedule.mark_layer_ready(layer);
    if (!overlaps) return;
    for (int b = schedule.take_ready(); b >= 0; b = schedule.take_ready()) launch(b);
  };
  // What backward did not launch (all of it when deferred), in plan order; then the
  // compute stream waits for every collective of the step (the wait span: the stream,
  // not the host, is what waits).
  const auto finish_comm = [&] {
    for (int b = schedule.take_next(); b >= 0; b = schedule.take_next()) launch(b);
    const bool any =
        std::any_of(works.begin(), works.end(), [](const auto& w) { return w != nullptr; });
    if (!any) return;
    timer.begin(s, Lane::kWait, SpanKind::kWait, step);
    for (const auto& work : works) {
      if (work) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(s, work->done_event(), 0));
    }
    timer.end(s);
  };

  TrainResult result;
  result.buckets = buckets;
  const float grad_scale = 1.0f / static_cast<float>(config.accumulate);
  for (step = 0; step < config.steps; ++step) {
    StepRecord record{.rank = rank, .step = step};
    timer.start_step(s);
    record.start_ns = timer.enabled() ? timer.anchor_ns() : now_ns();
    schedule.reset();
    if (!config.compute) {
      // Comm-only: the same units, launched in the same order, with no math between.
      for (int layer = model.layer_count() - 1; layer >= 0; --layer) on_layer_ready(layer);
      finish_comm();
    } else {
      model.reset_loss_sum();
      for (int micro = 0; micro < config.accumulate; ++micro) {
        const bool sync = micro + 1 == config.accumulate;
        model.forward(data.batch(step * config.accumulate + micro), &timer, step);
        model.backward(&timer, step, [&](int layer) {
          if (sync) on_layer_ready(layer);
        });
      }
      finish_comm();
      timer.begin(s, Lane::kCompute, SpanKind::kOptimizer, step);
      sgd.step(model.flat_params(), model.flat_grads(), grad_scale, s);
      model.zero_grad();
      timer.end(s);
      model.enqueue_loss_readback();
    }
    // The step's one host synchronization. The collectives' Works first, bounded by the
    // timeout, so a stuck peer ends the run with a message instead of a hang in the
    // stream synchronization; their errors are rethrown here.
    for (const auto& work : works) {
      if (work) wait_within(rank, *work, config.reducer.timeout_ns);
    }
    stream.synchronize();
    record.end_ns = timer.flush(recorder);
    for (auto& work : works) work.reset();
    if (config.compute) {
      record.loss = static_cast<float>(model.loss_sum_host() / config.accumulate);
    }
    if (config.verify) {
      record.param_hash = hash_floats(model.download_params());
      if (host != nullptr && host->size() > 1 && config.reducer.communicate) {
        verify_identical(*host, record.param_hash, step, config.reducer.timeout_ns);
      }
    }
    result.steps.push_back(record);
    if (rank == 0 && on_step) on_step(record);
  }
  if (rank == 0) result.final_params = model.download_params();
  result.blas =
      cuda::cublas_description() + ", " + std::string(to_string(config.precision)) + " GEMMs";
  result.device = "cuda";
  result.device_details = describe_devices({comm.device()});
  result.timing_source = "cuda-events";
  return result;
}

TrainResult train_local_cuda(const TrainConfig& config, const StepCallback& on_step) {
  validate(config);
  if (const std::string why = cuda_unavailable_reason(); !why.empty()) {
    throw UsageError("--device cuda: " + why);
  }
  std::vector<std::unique_ptr<DeviceCommunicator>> comms =
      make_local_device_communicators(comm_options(config), config.ranks);
  TANDEM_CHECK_EQ(comms.size(), static_cast<std::size_t>(config.ranks));

  const std::size_t capacity = train_span_capacity(config);
  std::vector<std::unique_ptr<RankRecorder>> recorders;
  std::vector<int> devices;
  for (int r = 0; r < config.ranks; ++r) {
    recorders.push_back(std::make_unique<RankRecorder>(r, capacity, config.record));
    comms[r]->set_recorder(recorders[r].get());
    devices.push_back(comms[r]->device());
  }
  TrainResult merged;
  merged.backend = std::string(comms[0]->backend_name());
  merged.backend_details = comms[0]->describe();

  // One thread per rank, as run_local_ranks: the first failure is rethrown after every
  // thread is joined, and a failed rank's communicator is aborted at once so that its
  // peers' collectives fail instead of waiting for it.
  std::vector<TrainResult> results(config.ranks);
  std::exception_ptr first_error;
  std::mutex error_mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < config.ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        results[r] = train_rank_cuda(config, *comms[r], *recorders[r], on_step);
      } catch (...) {
        {
          std::lock_guard lock(error_mutex);
          if (!first_error) first_error = std::current_exception();
        }
        comms[r]->abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  // Progress threads end: every span buffer is quiescent after this.
  destroy_device_communicators(comms);
  if (first_error) std::rethrow_exception(first_error);

  merged.timeline.ranks = config.ranks;
  for (const auto& recorder : recorders) {
    const auto spans = recorder->collect();
    merged.timeline.spans.insert(merged.timeline.spans.end(), spans.begin(), spans.end());
    merged.spans_dropped += recorder->dropped();
  }
  merged.buckets = std::move(results[0].buckets);
  merged.final_params = std::move(results[0].final_params);
  merged.blas = std::move(results[0].blas);
  merged.device = "cuda";
  merged.device_details = describe_devices(devices);
  merged.timing_source = "cuda-events";
  for (const auto& r : results) {
    merged.steps.insert(merged.steps.end(), r.steps.begin(), r.steps.end());
  }
  std::sort(merged.steps.begin(), merged.steps.end(), [](const auto& a, const auto& b) {
    return std::tie(a.step, a.rank) < std::tie(b.step, b.rank);
  });
  // --verify with threads: the ranks' hashes are compared once all have finished
  // (records are sorted by step, then rank, so rank 0's comes first in each step).
  if (config.verify && config.ranks > 1 && config.reducer.communicate) {
    for (std::size_t i = 0; i < merged.steps.size(); ++i) {
      const StepRecord& r = merged.steps[i];
      const StepRecord& first = merged.steps[i - static_cast<std::size_t>(r.rank)];
      if (r.param_hash != first.param_hash) {
        throw RuntimeError("--verify: after step " + std::to_string(r.step) + " rank " +
                           std::to_string(r.rank) + " holds different parameters than rank 0");
      }
    }
  }
  return merged;
}

TrainResult train_process_cuda(const TrainConfig& config, ProcessCommunicator& host,
                               const StepCallback& on_step) {
  validate(config);
  if (const std::string why = cuda_unavailable_reason(); !why.empty()) {
    throw UsageError("--device cuda: " + why);
  }
  const std::unique_ptr<DeviceCommunicator> comm =
      make_process_device_communicator(comm_options(config), host);
  TrainResult result =
      train_process_with(config, host, train_span_capacity(config), [&](RankRecorder& recorder) {
        comm->set_recorder(&recorder);
        try {
          TrainResult mine = train_rank_cuda(config, *comm, recorder, on_step, &host);
          comm->set_recorder(nullptr);
          return mine;
        } catch (...) {
          // `recorder` dies with this frame while collectives may still be in flight:
          // end them and join the progress thread before anything can record into it.
          comm->abort();
          comm->begin_shutdown();
          comm->set_recorder(nullptr);
          throw;
        }
      });
  result.backend = std::string(comm->backend_name());
  result.backend_details = comm->describe() + "; host communicator: " + host.describe();
  return result;
}

namespace {

[[maybe_unused]] const bool kRegistered =
    register_device_trainer(Device::kCuda, DeviceTrainer{.unavailable = &cuda_unavailable_reason,
                                                         .train_local = &train_local_cuda,
                                                         .train_process = &train_process_cuda});

}  // namespace
}  // namespace tandem
