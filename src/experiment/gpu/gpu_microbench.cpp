// The GEMM + all-reduce microbenchmark on GPUs (gpu_microbench.h).
#include "experiment/gpu_microbench.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <vector>

#include "compute/cuda/gemm.h"
#include "compute/precision.h"
#include "core/bytes.h"
#include "core/error.h"
#include "core/parse.h"
#include "cuda/check.h"
#include "cuda/resources.h"
#include "model/rng.h"
#include "timeline/gpu/kernel_timer.h"

namespace tandem {

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

// One rank of one run: its GPU, stream, buffers and kernel timer, on the run's
// communicator (bound to the compute stream).
int make_current(int ordinal) {
  const int device = ordinal < 0 ? 0 : ordinal;
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

struct GpuRank {
  // The device is made current first: the stream and the cuBLAS handle belong to it.
  GpuRank(const GpuMicrobenchSpec& spec, Precision precision, RankEnv& env)
      : device(make_current(env.ordinal)), comm(env.comm) {
    blas.set_stream(compute.get());
    const auto n = static_cast<std::size_t>(spec.bench.gemm_n);
    const std::size_t input_bytes = n * n * cuda::gemm_input_bytes(precision);
    a = cuda::DeviceBuffer<unsigned char>(input_bytes);
    b = cuda::DeviceBuffer<unsigned char>(input_bytes);
    c = cuda::DeviceBuffer<float>(n * n);
    grad = cuda::DeviceBuffer<float>(static_cast<std::size_t>(spec.bench.allreduce_bytes / 4));
    const auto host_a = gemm_input(precision, n * n, 1);
    const auto host_b = gemm_input(precision, n * n, 2);
    a.upload(host_a, compute.get());
    b.upload(host_b, compute.get());
    // Gradients of 1/64: sums and averages stay exact, the data is not all zeros.
    std::vector<float> ones(std::min<std::size_t>(grad.size(), 1 << 22), 1.0f / 64);
    for (std::size_t off = 0; off < grad.size(); off += ones.size()) {
      const std::size_t len = std::min(ones.size(), grad.size() - off);
      grad.upload(std::span<const float>(ones.data(), len), compute.get(), off);
      compute.synchronize();  // `ones` is reused
    }
    comm.bind_stream(compute.get());
  }
  // Kernels still queued may use the buffers about to be freed.
  ~GpuRank() { cudaStreamSynchronize(compute.get()); }

  int device;
  Communicator& comm;
  cuda::Stream compute;
  cuda::CublasHandle blas;
  cuda::DeviceBuffer<unsigned char> a, b;
  cuda::DeviceBuffer<float> c, grad;
};

class GpuMicrobench final : public Workload {
 public:
  explicit GpuMicrobench(const GpuMicrobenchSpec& spec)
      : spec_(spec), precision_(parse_precision(spec.precision)) {
    if (cuda::device_count() == 0) {
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
    backend_ = resolve_device_comm(spec.comm_backend, spec.bench.ranks);
    if (backend_ == "shared") {
      throw UsageError(
          "--device-comm shared: the GPU microbenchmark runs a rank per GPU (nccl) or one "
          "rank over the emulated ring; ranks share one GPU with a --model workload");
    }
  }

  std::string describe() const override {
    return "gpu microbench " + spec_.bench.to_string() + " (" + std::to_string(gemm_count_) + " " +
           std::string(to_string(precision_)) + " GEMMs per iteration), " +
           std::to_string(spec_.bench.ranks) + " rank(s) on " + gpu_name_ + ", all-reduce " +
           backend_ + (backend_ == "emulated" ? " (emulated)" : "") + "; kernel timing: " + timing_;
  }

  nlohmann::json config_json() const override {
    return {
        {"workload", "microbench"},
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
        {"backend", backend_},
        {"backend_details", backend_details_},
        {"emulated", backend_ == "emulated"},
        {"emulated_peers", backend_ == "emulated" ? nlohmann::json(spec_.emulated_peers) : nullptr},
        {"kernel_timing", timing_},
        {"cupti_comm_kernels_ms", cupti_comm_ms_}};
  }

  Timeline run(Job& job, Scenario scenario, int steps) override {
    if (gemm_count_ == 0) {
      gemm_count_ = spec_.bench.gemm_count > 0 ? spec_.bench.gemm_count : calibrate(job);
    }
    const RunResult run =
        job.run(run_spec(static_cast<std::size_t>(steps) * 4 + 64), [&](RankEnv& env) {
          GpuRank g(spec_, precision_, env);
          KernelTimer timer({.device = g.device, .prefer_cupti = spec_.prefer_cupti});
          NameTable names;
          std::vector<Span> spans;
          std::vector<WorkPtr> works;
          ending_on_failure(g.comm, [&] {
            timer.start();
            for (int step = 0; step < steps; ++step) iteration(g, timer, scenario, step, works);
            spans = timer.stop(&names);
            for (const WorkPtr& w : works) w->synchronize();  // rethrows a failed collective
          });
          // Comm spans come from the communicator (with bytes and bucket); CUPTI's view of
          // the same kernels is kept only as a total, in config_json.
          double comm_ms = 0;
          std::erase_if(spans, [&](const Span& s) {
            if (s.lane != Lane::kComm) return false;
            comm_ms += static_cast<double>(s.duration_ns()) / 1e6;
            return true;
          });
          // Names travel as text: each process has its own table.
          std::vector<std::string> span_names;
          for (Span& s : spans) {
            span_names.push_back(names.name(s.name));
            s.name = kNoName;
            s.rank = env.comm.rank();
          }
          ByteWriter out;
          out.put_vector(spans);
          out.put<std::uint64_t>(span_names.size());
          for (const std::string& name : span_names) out.put_string(name);
          out.put(comm_ms);
          out.put_string(timer.source_name());
          return out.take();
        });
    backend_details_ = run.backend_details;
    Timeline timeline = run.timeline;
    for (std::size_t r = 0; r < run.payloads.size(); ++r) {
      ByteReader in(run.payloads[r]);
      std::vector<Span> spans = in.get_vector<Span>();
      const auto count = in.get<std::uint64_t>();
      for (std::uint64_t i = 0; i < count; ++i) {
        spans[i].name = timeline.names->intern(in.get_string());
      }
      const double comm_ms = in.get<double>();
      std::string timing = in.get_string();
      if (r == 0) {
        cupti_comm_ms_ = comm_ms;
        timing_ = std::move(timing);
      }
      timeline.spans.insert(timeline.spans.end(), spans.begin(), spans.end());
    }
    return timeline;
  }

 private:
  RunSpec run_spec(std::size_t capacity) const {
    return {.ranks = spec_.bench.ranks,
            .device = Device::kCuda,
            .device_comm = spec_.comm_backend,
            .comm = {.timeout =
                         std::chrono::nanoseconds(static_cast<std::int64_t>(spec_.timeout_s * 1e9)),
                     .device = {.emulated_peers = spec_.emulated_peers,
                                .emulated_blocks = spec_.emulated_blocks,
                                .nccl_min_ctas = spec_.nccl_min_ctas,
                                .nccl_max_ctas = spec_.nccl_max_ctas}},
            .span_capacity_per_lane = capacity};
  }

  void gemms(GpuRank& g, KernelTimer& timer, int count) const {
    const int n = spec_.bench.gemm_n;
    const double flops = 2.0 * n * n * n;
    for (int i = 0; i < count; ++i) {
      const auto region = timer.begin(g.compute.get(), Lane::kCompute, SpanKind::kKernel, i, flops);
      cuda::gemm(g.blas, precision_, false, false, n, n, n, 1.0f, g.a.data(), n, g.b.data(), n,
                 0.0f, g.c.data(), n);
      timer.end(g.compute.get(), region);
    }
  }

  // Enqueues the all-reduce behind what the compute stream holds now.
  static WorkPtr allreduce(GpuRank& g, int step) {
    return g.comm.allreduce(std::span<float>(g.grad.data(), g.grad.size()), ReduceOp::kAverage,
                            {.step = step, .tag = 0});
  }

  // The compute stream waits for the all-reduce (Work::wait on a device communicator),
  // then marks the iteration's end on the compute lane (as an optimizer step would):
  // E2E runs from the first GEMM to here.
  static void join(GpuRank& g, KernelTimer& timer, const WorkPtr& work) {
    work->wait();
    timer.marker(g.compute.get(), Lane::kCompute, SpanKind::kOptimizer);
  }

  void iteration(GpuRank& g, KernelTimer& timer, Scenario scenario, int step,
                 std::vector<WorkPtr>& works) const {
    timer.mark_step(g.compute.get(), step);
    switch (scenario) {
      case Scenario::kComputeOnly:
        gemms(g, timer, gemm_count_);
        break;
      case Scenario::kCommOnly:
        works.push_back(allreduce(g, step));
        works.back()->wait();
        break;
      case Scenario::kSequential:
        gemms(g, timer, gemm_count_);
        works.push_back(allreduce(g, step));
        join(g, timer, works.back());
        break;
      case Scenario::kOverlapped:
        works.push_back(allreduce(g, step));
        gemms(g, timer, gemm_count_);
        join(g, timer, works.back());
        break;
    }
  }

  // GEMMs per iteration that cover one all-reduce: each timed alone with events, after a
  // warm-up, on every rank (the all-reduce is collective); rank 0's answer is sent to every
  // rank over the host control communicator.
  int calibrate(Job& job) {
    int count = 1;
    job.run(run_spec(64), [&](RankEnv& env) {
      GpuRank g(spec_, precision_, env);
      KernelTimer timer({.device = g.device, .prefer_cupti = false});
      std::vector<float> answer(1);
      ending_on_failure(g.comm, [&] {
        cuda::Event t0(cuda::Event::Timing::kOn), t1(cuda::Event::Timing::kOn),
            t2(cuda::Event::Timing::kOn);
        float gemm_ms = 0, allreduce_ms = 0;
        for (int round = 0; round < 3; ++round) {
          TANDEM_CUDA_CHECK(cudaEventRecord(t0.get(), g.compute.get()));
          gemms(g, timer, 1);
          TANDEM_CUDA_CHECK(cudaEventRecord(t1.get(), g.compute.get()));
          const WorkPtr w = allreduce(g, -1);
          w->wait();
          TANDEM_CUDA_CHECK(cudaEventRecord(t2.get(), g.compute.get()));
          TANDEM_CUDA_CHECK(cudaEventSynchronize(t2.get()));
          w->synchronize();
          TANDEM_CUDA_CHECK(cudaEventElapsedTime(&gemm_ms, t0.get(), t1.get()));
          TANDEM_CUDA_CHECK(cudaEventElapsedTime(&allreduce_ms, t1.get(), t2.get()));
        }
        answer[0] = static_cast<float>(std::clamp(
            static_cast<int>(std::ceil(allreduce_ms / std::max(gemm_ms, 1e-3f))), 1, 100000));
      });
      env.control.broadcast(answer, 0)->synchronize();
      if (env.comm.rank() == 0 || !job.in_process()) count = static_cast<int>(answer[0]);
      return std::string();
    });
    return count;
  }

  GpuMicrobenchSpec spec_;
  Precision precision_;
  std::string gpu_name_ = "GPU";
  std::string backend_;
  std::string backend_details_;
  std::string timing_ = "(not run yet)";
  int gemm_count_ = 0;
  double cupti_comm_ms_ = 0;
};

std::unique_ptr<Workload> make(const GpuMicrobenchSpec& spec) {
  return std::make_unique<GpuMicrobench>(spec);
}

[[maybe_unused]] const bool kRegistered = register_gpu_microbench(&make);

}  // namespace
}  // namespace tandem
