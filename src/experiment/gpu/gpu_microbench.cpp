// The GEMM + all-reduce microbenchmark on GPUs (gpu_microbench.h).
#include "experiment/gpu/gpu_microbench.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/device/device_backends.h"
#include "compute/cuda/device_buffer.h"
#include "compute/cuda/gemm.h"
#include "compute/precision.h"
#include "core/error.h"
#include "core/parse.h"
#include "model/rng.h"
#include "timeline/gpu/kernel_timer.h"

namespace tandem {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

namespace {

// Uniform(-1, 1) values in the GEMM input type, made on the host once per rank.
std::vector<unsigned char> gemm_input(Precision precision, std::size_t elems, std::uint64_t seed) {
  detail::SplitMix64 rng(seed);
  const std::size_t size = cuda::gemm_input_bytes(precision);
  std::vector<unsigned char> out(elems * size);
  for (std::size_t i = 0; i < elems; ++i) {
    const auto v = static_cast<float>(rng.uniform(-1.0, 1.0));
    unsigned char* p = out.data() + i * size;
    if (precision == Precision::kFp16) {
      const __half h = __float2half_rn(v);
      std::memcpy(p, &h, size);
    } else if (precision == Precision::kBf16) {
      const __nv_bfloat16 h = __float2bfloat16_rn(v);
      std::memcpy(p, &h, size);
    } else {
      std::memcpy(p, &v, size);
    }
  }
  return out;
}

// One rank: its GPU, streams, buffers, timer and communicator.
struct GpuRank {
  int device = 0;
  DeviceCommunicator* comm = nullptr;
  cuda::Stream compute;
  cuda::CublasHandle blas;
  cuda::DeviceBuffer<unsigned char> a, b;
  cuda::DeviceBuffer<float> c, grad;
  cuda::Event ready;
  std::unique_ptr<KernelTimer> timer;
};

class GpuMicrobench final : public Workload {
 public:
  explicit GpuMicrobench(const GpuMicrobenchSpec& spec)
      : spec_(spec), precision_(parse_precision(spec.precision)) {
    const int devices = cuda_device_count();
    if (devices == 0) {
      throw UsageError("--device cuda: no usable CUDA device on this machine");
    }
    const double bytes = 3.0 * spec.bench.gemm_n * spec.bench.gemm_n * 4 +
                         static_cast<double>(spec.bench.allreduce_bytes) * 2;
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      gpu_name_ = prop.name;
      if (bytes > static_cast<double>(prop.totalGlobalMem) * 0.9) {
        throw UsageError("--microbench: " + spec.bench.to_string() + " needs about " +
                         format_bytes(bytes) + " per GPU; " + gpu_name_ + " has " +
                         format_bytes(static_cast<double>(prop.totalGlobalMem)));
      }
    }
    DeviceCommOptions options{
        .backend = spec.comm_backend,
        .emulated_peers = spec.emulated_peers,
        .emulated_blocks = spec.emulated_blocks,
        .nccl_min_ctas = spec.nccl_min_ctas,
        .nccl_max_ctas = spec.nccl_max_ctas,
        .timeout = std::chrono::seconds(std::max<std::int64_t>(1, std::llround(spec.timeout_s)))};
    comms_ = make_local_device_communicators(options, spec.bench.ranks);
    for (auto& comm : comms_) {
      TANDEM_CUDA_CHECK(cudaSetDevice(comm->device()));
      auto r = std::make_unique<GpuRank>();
      r->device = comm->device();
      r->comm = comm.get();
      r->blas.set_stream(r->compute.get());
      const auto n = static_cast<std::size_t>(spec.bench.gemm_n);
      const std::size_t input_bytes = n * n * cuda::gemm_input_bytes(precision_);
      r->a = cuda::DeviceBuffer<unsigned char>(input_bytes);
      r->b = cuda::DeviceBuffer<unsigned char>(input_bytes);
      r->c = cuda::DeviceBuffer<float>(n * n);
      r->grad = cuda::DeviceBuffer<float>(static_cast<std::size_t>(spec.bench.allreduce_bytes / 4));
      const auto host_a = gemm_input(precision_, n * n, 1);
      const auto host_b = gemm_input(precision_, n * n, 2);
      r->a.upload(host_a, r->compute.get());
      r->b.upload(host_b, r->compute.get());
      // Gradients of 1/64: sums and averages stay exact, the data is not all zeros.
      std::vector<float> ones(std::min<std::size_t>(r->grad.size(), 1 << 22), 1.0f / 64);
      for (std::size_t off = 0; off < r->grad.size(); off += ones.size()) {
        const std::size_t len = std::min(ones.size(), r->grad.size() - off);
        r->grad.upload(std::span<const float>(ones.data(), len), r->compute.get(), off);
        r->compute.synchronize();  // `ones` is reused
      }
      r->compute.synchronize();
      // One timer per rank's device; they share CUPTI's activity API.
      r->timer = std::make_unique<KernelTimer>(
          KernelTimerOptions{.device = r->device, .prefer_cupti = spec.prefer_cupti});
      ranks_.push_back(std::move(r));
    }
  }

  ~GpuMicrobench() override {
    ranks_.clear();
    destroy_device_communicators(comms_);  // every rank starts NCCL's finalize first
  }
  GpuMicrobench(const GpuMicrobench&) = delete;
  GpuMicrobench& operator=(const GpuMicrobench&) = delete;

  std::string describe() const override {
    const DeviceCommunicator& comm = *comms_.front();
    return "gpu microbench " + spec_.bench.to_string() + " (" + std::to_string(gemm_count_) + " " +
           std::string(to_string(precision_)) + " GEMMs per iteration), " +
           std::to_string(spec_.bench.ranks) + " rank(s) on " + gpu_name_ + ", all-reduce " +
           std::string(comm.backend_name()) + (comm.emulated() ? " (emulated)" : "") +
           "; kernel timing: " + ranks_.front()->timer->source_name();
  }

  nlohmann::json config_json() const override {
    const DeviceCommunicator& comm = *comms_.front();
    nlohmann::json timing = nlohmann::json::array();
    for (const auto& r : ranks_) timing.push_back(r->timer->source_name());
    return {{"workload", "microbench"},
            {"device", "cuda"},
            {"gpu", gpu_name_},
            {"gemm_n", spec_.bench.gemm_n},
            {"gemm_count", gemm_count_},
            {"gemm_count_calibrated", spec_.bench.gemm_count == 0},
            {"precision", to_string(precision_)},
            {"gemm_library", cuda::cublas_description()},
            {"allreduce_bytes", spec_.bench.allreduce_bytes},
            {"allreduce_dtype", "fp32"},
            {"ranks", spec_.bench.ranks},
            {"backend", comm.backend_name()},
            {"backend_details", comm.describe()},
            {"emulated", comm.emulated()},
            {"emulated_peers", comm.emulated() ? nlohmann::json(spec_.emulated_peers) : nullptr},
            {"kernel_timing", timing},
            {"cupti_comm_kernels_ms", cupti_comm_ms_}};
  }

  Timeline run(Scenario scenario, int steps) override {
    if (gemm_count_ == 0)
      gemm_count_ = spec_.bench.gemm_count > 0 ? spec_.bench.gemm_count : calibrate();
    Timeline timeline;
    timeline.ranks = static_cast<int>(ranks_.size());
    const std::size_t capacity = static_cast<std::size_t>(steps) * 4 + 64;
    std::vector<std::unique_ptr<RankRecorder>> recorders;
    std::vector<std::vector<Span>> kernel_spans(ranks_.size());
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      recorders.push_back(std::make_unique<RankRecorder>(static_cast<int>(r), capacity));
    }
    double comm_kernel_ms = 0;
    on_every_rank([&](std::size_t r) {
      GpuRank& g = *ranks_[r];
      std::vector<DeviceWorkPtr> works;
      // Whatever happens, no collective may still write into this run's recorder after
      // it: wait for every one issued (each ends by the timeout at worst), then detach.
      struct Detach {
        GpuRank& g;
        std::vector<DeviceWorkPtr>& works;
        ~Detach() {
          for (const DeviceWorkPtr& w : works) {
            try {
              w->wait();
            } catch (...) {  // the error, if any, is already on its way out of run()
            }
          }
          g.comm->set_recorder(nullptr);
        }
      } detach{g, works};
      g.comm->set_recorder(recorders[r].get());
      g.timer->start();
      for (int step = 0; step < steps; ++step) iteration(g, scenario, step, works);
      std::vector<Span> spans = g.timer->stop(timeline.names.get());
      for (const DeviceWorkPtr& w : works) w->wait();  // rethrows a failed collective
      // Comm spans come from the communicator (with bytes and bucket); CUPTI's view of
      // the same kernels is kept only as a total, in config_json.
      double ms = 0;
      std::erase_if(spans, [&](const Span& s) {
        if (s.lane != Lane::kComm) return false;
        ms += static_cast<double>(s.duration_ns()) / 1e6;
        return true;
      });
      for (Span& s : spans) s.rank = static_cast<int>(r);
      kernel_spans[r] = std::move(spans);
      if (r == 0) comm_kernel_ms = ms;
    });
    cupti_comm_ms_ = comm_kernel_ms;
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      for (const Span& s : recorders[r]->collect()) timeline.spans.push_back(s);
      timeline.spans.insert(timeline.spans.end(), kernel_spans[r].begin(), kernel_spans[r].end());
    }
    return timeline;
  }

 private:
  // Runs body(rank) on a thread per rank (each on its device); rethrows the first error.
  template <typename F>
  void on_every_rank(F&& body) {
    std::vector<std::thread> threads;
    std::mutex mutex;
    std::exception_ptr first;
    for (std::size_t r = 0; r < ranks_.size(); ++r) {
      threads.emplace_back([&, r] {
        try {
          TANDEM_CUDA_CHECK(cudaSetDevice(ranks_[r]->device));
          body(r);
        } catch (...) {
          std::lock_guard lock(mutex);
          if (!first) first = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    if (first) std::rethrow_exception(first);
  }

  void gemms(GpuRank& g, int count) const {
    const int n = spec_.bench.gemm_n;
    const double flops = 2.0 * n * n * n;
    for (int i = 0; i < count; ++i) {
      const auto region =
          g.timer->begin(g.compute.get(), Lane::kCompute, SpanKind::kKernel, i, flops);
      cuda::gemm(g.blas, precision_, false, false, n, n, n, 1.0f, g.a.data(), n, g.b.data(), n,
                 0.0f, g.c.data(), n);
      g.timer->end(g.compute.get(), region);
    }
  }

  // Enqueues the all-reduce behind what the compute stream holds now.
  DeviceWorkPtr allreduce(GpuRank& g, int step) const {
    TANDEM_CUDA_CHECK(cudaEventRecord(g.ready.get(), g.compute.get()));
    return g.comm->allreduce(g.grad.data(), g.grad.size(), DeviceDtype::kFloat32,
                             ReduceOp::kAverage, g.ready.get(), {.step = step, .tag = 0});
  }

  // The compute stream waits for the all-reduce, then marks the iteration's end on the
  // compute lane (as an optimizer step would): E2E runs from the first GEMM to here.
  static void join(GpuRank& g, const DeviceWorkPtr& work) {
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(g.compute.get(), work->done_event(), 0));
    g.timer->marker(g.compute.get(), Lane::kCompute, SpanKind::kOptimizer);
  }

  void iteration(GpuRank& g, Scenario scenario, int step, std::vector<DeviceWorkPtr>& works) const {
    g.timer->mark_step(g.compute.get(), step);
    switch (scenario) {
      case Scenario::kComputeOnly:
        gemms(g, gemm_count_);
        break;
      case Scenario::kCommOnly: {
        works.push_back(allreduce(g, step));
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(g.compute.get(), works.back()->done_event(), 0));
        break;
      }
      case Scenario::kSequential:
        gemms(g, gemm_count_);
        works.push_back(allreduce(g, step));
        join(g, works.back());
        break;
      case Scenario::kOverlapped:
        works.push_back(allreduce(g, step));
        gemms(g, gemm_count_);
        join(g, works.back());
        break;
    }
  }

  // GEMMs per iteration that cover one all-reduce: each timed alone with events, after a
  // warm-up, on every rank (the all-reduce is collective); rank 0's answer counts.
  int calibrate() {
    std::vector<int> counts(ranks_.size(), 1);
    on_every_rank([&](std::size_t r) {
      GpuRank& g = *ranks_[r];
      cuda::Event t0(cuda::Event::Timing::kOn), t1(cuda::Event::Timing::kOn),
          t2(cuda::Event::Timing::kOn);
      float gemm_ms = 0, allreduce_ms = 0;
      for (int round = 0; round < 3; ++round) {
        TANDEM_CUDA_CHECK(cudaEventRecord(t0.get(), g.compute.get()));
        gemms(g, 1);
        TANDEM_CUDA_CHECK(cudaEventRecord(t1.get(), g.compute.get()));
        const DeviceWorkPtr w = allreduce(g, -1);
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(g.compute.get(), w->done_event(), 0));
        TANDEM_CUDA_CHECK(cudaEventRecord(t2.get(), g.compute.get()));
        TANDEM_CUDA_CHECK(cudaEventSynchronize(t2.get()));
        w->wait();
        TANDEM_CUDA_CHECK(cudaEventElapsedTime(&gemm_ms, t0.get(), t1.get()));
        TANDEM_CUDA_CHECK(cudaEventElapsedTime(&allreduce_ms, t1.get(), t2.get()));
      }
      counts[r] = std::clamp(static_cast<int>(std::ceil(allreduce_ms / std::max(gemm_ms, 1e-3f))),
                             1, 100000);
    });
    return counts.front();
  }

  GpuMicrobenchSpec spec_;
  Precision precision_;
  std::string gpu_name_ = "GPU";
  std::vector<std::unique_ptr<DeviceCommunicator>> comms_;
  std::vector<std::unique_ptr<GpuRank>> ranks_;  // destroyed before comms_
  int gemm_count_ = 0;
  double cupti_comm_ms_ = 0;
};

}  // namespace

std::unique_ptr<Workload> make_gpu_microbench_workload(const GpuMicrobenchSpec& spec) {
  return std::make_unique<GpuMicrobench>(spec);
}

}  // namespace tandem
