// The GEMM + all-reduce microbenchmark (the paper's Figure 8) on the CPU, on any Job: threads
// of one process (local backend) or the processes of an mpirun job.
#include <algorithm>
#include <cmath>
#include <vector>

#include "compute/cpu/blas.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"
#include "experiment/workload.h"

namespace tandem {

MicrobenchSpec MicrobenchSpec::parse(std::string_view text) {
  const auto kv = parse_key_values(text, "--microbench", "gemm allreduce");
  if (!kv.count("gemm") || !kv.count("allreduce")) {
    throw UsageError("--microbench: expected gemm=N[xCOUNT],allreduce=SIZE, got '" +
                     std::string(text) + "'");
  }
  MicrobenchSpec spec;
  const std::string& gemm = kv.at("gemm");
  const auto x = gemm.find('x');
  spec.gemm_n = static_cast<int>(parse_int(gemm.substr(0, x), "--microbench gemm size"));
  if (x != std::string::npos) {
    spec.gemm_count = static_cast<int>(parse_int(gemm.substr(x + 1), "--microbench gemm count"));
    if (spec.gemm_count < 1 || spec.gemm_count > 1'000'000) {
      throw UsageError("--microbench: gemm count must be 1..1000000");
    }
  }
  if (spec.gemm_n < 1 || spec.gemm_n > 32768) {
    throw UsageError("--microbench: gemm size must be 1..32768, got " +
                     std::to_string(spec.gemm_n));
  }
  spec.allreduce_bytes = parse_bytes(kv.at("allreduce"));
  if (spec.allreduce_bytes < 4 || spec.allreduce_bytes > (4ll << 30)) {
    throw UsageError("--microbench: allreduce size must be 4 B..4 GiB, got '" + kv.at("allreduce") +
                     "'");
  }
  return spec;
}

std::string MicrobenchSpec::to_string() const {
  return "gemm=" + std::to_string(gemm_n) +
         (gemm_count ? "x" + std::to_string(gemm_count) : std::string()) +
         ",allreduce=" + format_bytes(static_cast<double>(allreduce_bytes));
}

namespace {

class MicrobenchWorkload final : public Workload {
 public:
  explicit MicrobenchWorkload(const MicrobenchSpec& spec) : spec_(spec) {
    const double bytes_per_rank = 3.0 * spec.gemm_n * spec.gemm_n * 4 + spec.allreduce_bytes;
    if (bytes_per_rank * spec.ranks > 16e9) {
      throw UsageError("--microbench: " + spec.to_string() + " on " + std::to_string(spec.ranks) +
                       " ranks needs more than 16 GB");
    }
  }

  std::string describe() const override {
    return "microbench " + spec_.to_string() + " (" + std::to_string(gemm_count_) +
           " sgemm per iteration), " + std::to_string(spec_.ranks) + " ranks";
  }

  nlohmann::json config_json() const override {
    return {{"workload", "microbench"},
            {"gemm_n", spec_.gemm_n},
            {"gemm_count", gemm_count_},
            {"gemm_count_calibrated", spec_.gemm_count == 0},
            {"allreduce_bytes", spec_.allreduce_bytes},
            {"ranks", spec_.ranks},
            {"blas_threads_per_rank", spec_.blas_threads},
            {"link", spec_.link.enabled() ? nlohmann::json(spec_.link.describe()) : nullptr},
            {"link_emulated", spec_.link.enabled()}};
  }

  Timeline run(Job& job, Scenario scenario, int steps) override {
    set_blas_threads(spec_.blas_threads);
    if (gemm_count_ == 0) gemm_count_ = spec_.gemm_count > 0 ? spec_.gemm_count : calibrate(job);
    const std::size_t capacity = static_cast<std::size_t>(steps) * (gemm_count_ + 4) + 64;
    return job
        .run(run_spec(capacity, true),
             [&](RankEnv& env) {
               Buffers b(spec_);
               ending_on_failure(env.comm, [&] {
                 for (int step = 0; step < steps; ++step) {
                   iteration(scenario, step, env.comm, env.recorder, b);
                 }
               });
               return std::string();
             })
        .timeline;
  }

 private:
  struct Buffers {
    explicit Buffers(const MicrobenchSpec& spec)
        : n(spec.gemm_n),
          a(static_cast<std::size_t>(n) * n, 0.5f),
          b(a.size(), 0.25f),
          c(a.size(), 0.0f),
          grad(static_cast<std::size_t>(spec.allreduce_bytes / 4), 1.0f) {}
    int n;
    std::vector<float> a, b, c, grad;
  };

  void gemms(int step, RankRecorder& recorder, Buffers& b) const {
    const double flops = 2.0 * b.n * b.n * b.n;
    for (int g = 0; g < gemm_count_; ++g) {
      ScopedSpan span(recorder, Lane::kCompute, SpanKind::kKernel, step, g, kNoName, flops);
      sgemm(false, false, b.n, b.n, b.n, 1.0f, b.a.data(), b.n, b.b.data(), b.n, 0.0f, b.c.data(),
            b.n);
    }
  }

  static WorkPtr start_allreduce(int step, Communicator& comm, Buffers& b) {
    return comm.allreduce(b.grad, ReduceOp::kAverage,
                          {.kind = SpanKind::kAllreduce,
                           .bytes = static_cast<std::int64_t>(b.grad.size() * 4),
                           .step = step,
                           .tag = 0});
  }

  static void wait(int step, const WorkPtr& work, RankRecorder& recorder) {
    ScopedSpan span(recorder, Lane::kWait, SpanKind::kWait, step, 0);
    work->wait();
  }

  // Closes the iteration on the compute lane after communication, as an optimizer step
  // would: E2E runs from the first kernel to here. It does no work.
  static void step_end(int step, RankRecorder& recorder) {
    ScopedSpan span(recorder, Lane::kCompute, SpanKind::kOptimizer, step);
  }

  void iteration(Scenario scenario, int step, Communicator& comm, RankRecorder& recorder,
                 Buffers& b) const {
    switch (scenario) {
      case Scenario::kComputeOnly:
        gemms(step, recorder, b);
        break;
      case Scenario::kCommOnly:
        wait(step, start_allreduce(step, comm, b), recorder);
        break;
      case Scenario::kSequential:
        gemms(step, recorder, b);
        wait(step, start_allreduce(step, comm, b), recorder);
        step_end(step, recorder);
        break;
      case Scenario::kOverlapped: {
        const WorkPtr work = start_allreduce(step, comm, b);
        gemms(step, recorder, b);
        wait(step, work, recorder);
        step_end(step, recorder);
        break;
      }
    }
  }

  RunSpec run_spec(std::size_t capacity, bool record) const {
    return {.ranks = spec_.ranks,
            .comm = {.local = {.link = spec_.link}},
            .span_capacity_per_lane = capacity,
            .record = record,
            .bind = spec_.bind,
            .threads_per_rank = spec_.blas_threads};
  }

  // Enough sgemm calls to cover one all-reduce, each timed alone; rank 0's answer is
  // broadcast so that every rank runs the same loop.
  int calibrate(Job& job) const {
    int count = 1;
    job.run(run_spec(64, false), [&](RankEnv& env) {
      Communicator& comm = env.comm;
      Buffers b(spec_);
      std::vector<float> ratio(1);
      ending_on_failure(comm, [&] {
        auto median_ns = [](std::vector<std::int64_t> v) {
          std::sort(v.begin(), v.end());
          return static_cast<double>(v[v.size() / 2]);
        };
        std::vector<std::int64_t> gemm_ns, allreduce_ns;
        for (int i = 0; i < 4; ++i) {
          const std::int64_t t0 = now_ns();
          sgemm(false, false, b.n, b.n, b.n, 1.0f, b.a.data(), b.n, b.b.data(), b.n, 0.0f,
                b.c.data(), b.n);
          const std::int64_t t1 = now_ns();
          start_allreduce(-1, comm, b)->wait();
          const std::int64_t t2 = now_ns();
          if (i > 0) {
            gemm_ns.push_back(t1 - t0);
            allreduce_ns.push_back(t2 - t1);
          }
        }
        ratio[0] = static_cast<float>(
            std::ceil(median_ns(allreduce_ns) / std::max(1.0, median_ns(gemm_ns))));
        comm.broadcast(ratio, 0)->wait();
      });
      // Every process of a job gets the same answer from rank 0.
      if (comm.rank() == 0 || !job.in_process()) {
        count = std::clamp(static_cast<int>(ratio[0]), 1, 100000);
      }
      return std::string();
    });
    return count;
  }

  MicrobenchSpec spec_;
  int gemm_count_ = 0;
};

}  // namespace

std::unique_ptr<Workload> make_microbench_workload(const MicrobenchSpec& spec) {
  return std::make_unique<MicrobenchWorkload>(spec);
}

}  // namespace tandem
