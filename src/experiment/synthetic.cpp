// Synthetic compute/communication phases whose timeline is known in advance: the oracle
// of the metric suite (every metric can be computed by hand from the spec).
#include <sys/prctl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"
#include "experiment/workload.h"

namespace tandem {

SyntheticSpec SyntheticSpec::parse(std::string_view text) {
  if (!text.starts_with("synthetic:")) {
    throw UsageError("expected synthetic:compute=D,comm=D,chunks=N[,mode=sleep|busy|ideal], got '" +
                     std::string(text) + "'");
  }
  const auto kv = parse_key_values(text.substr(10), "synthetic", "compute comm chunks mode");
  SyntheticSpec spec;
  if (!kv.count("compute") || !kv.count("comm")) {
    throw UsageError("synthetic: compute= and comm= are required");
  }
  spec.compute_ns = parse_duration_ns(kv.at("compute"));
  spec.comm_ns = parse_duration_ns(kv.at("comm"));
  if (spec.compute_ns <= 0 || spec.comm_ns <= 0 || spec.compute_ns > 3'600'000'000'000 ||
      spec.comm_ns > 3'600'000'000'000) {
    throw UsageError("synthetic: compute and comm must be between 1 ns and 1 hour");
  }
  if (kv.count("chunks")) {
    spec.chunks = static_cast<int>(parse_int(kv.at("chunks"), "synthetic chunks"));
    if (spec.chunks < 1 || spec.chunks > 100000)
      throw UsageError("synthetic: chunks must be 1..100000");
  }
  if (kv.count("mode")) {
    const std::string& mode = kv.at("mode");
    if (mode != "sleep" && mode != "busy" && mode != "ideal") {
      throw UsageError("synthetic: mode must be sleep, busy or ideal, got '" + mode + "'");
    }
    spec.mode = mode == "busy"    ? SyntheticMode::kBusy
                : mode == "ideal" ? SyntheticMode::kIdeal
                                  : SyntheticMode::kSleep;
  }
  return spec;
}

namespace {
std::string_view mode_name(SyntheticMode mode) {
  switch (mode) {
    case SyntheticMode::kBusy:
      return "busy";
    case SyntheticMode::kIdeal:
      return "ideal";
    case SyntheticMode::kSleep:
      break;
  }
  return "sleep";
}
}  // namespace

std::string SyntheticSpec::to_string() const {
  return "synthetic:compute=" + format_duration_ns(static_cast<double>(compute_ns)) +
         ",comm=" + format_duration_ns(static_cast<double>(comm_ns)) +
         ",chunks=" + std::to_string(chunks) + ",mode=" + std::string(mode_name(mode));
}

namespace {

// Work of a fixed amount, calibrated (alone, once) to take a given time: arithmetic for
// compute, memory copies for communication. Under contention it takes longer.
class BusyWork {
 public:
  BusyWork() : src_(4 << 20, 1.0f), dst_(src_.size()) {
    arith_per_ns_ = rate([this](std::int64_t n) { arithmetic(n); });
    copy_per_ns_ = rate([this](std::int64_t n) { copy(n); });
  }
  void compute_for(std::int64_t ns) { arithmetic(static_cast<std::int64_t>(ns * arith_per_ns_)); }
  void comm_for(std::int64_t ns) { copy(static_cast<std::int64_t>(ns * copy_per_ns_)); }

 private:
  template <typename F>
  static double rate(F&& work) {
    const std::int64_t units = 1 << 22;
    work(units / 8);  // warm
    double best = 0;
    for (int i = 0; i < 3; ++i) {
      const std::int64_t t0 = now_ns();
      work(units);
      best = std::max(best, static_cast<double>(units) / static_cast<double>(now_ns() - t0 + 1));
    }
    return best;
  }
  void arithmetic(std::int64_t n) {
    float x = sink_.load(std::memory_order_relaxed);
    for (std::int64_t i = 0; i < n; ++i) x = x * 0.999999f + 1e-7f;
    sink_.store(x, std::memory_order_relaxed);
  }
  // One unit: one float copied.
  void copy(std::int64_t n) {
    while (n > 0) {
      const std::size_t count = std::min<std::int64_t>(n, static_cast<std::int64_t>(src_.size()));
      std::memcpy(dst_.data(), src_.data(), count * sizeof(float));
      n -= static_cast<std::int64_t>(count);
    }
  }
  std::vector<float> src_, dst_;
  std::atomic<float> sink_{0};
  double arith_per_ns_ = 0, copy_per_ns_ = 0;
};

// Sleeps until `end_ns` on the steady clock. A sleep-mode phase follows an ideal
// schedule computed from deadlines, never from wake-up times, so a late wake-up (a
// preempted vCPU can be milliseconds late) shortens the next chunk instead of shifting
// every chunk after it.
void sleep_until_ns(std::int64_t end_ns) {
  // Linux lets a sleeper wake up to 50 us late by default (timer slack); a synthetic
  // phase is only as exact as its wake-ups, so ask for 1 ns on this thread.
  static thread_local const bool precise = ::prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0) == 0;
  (void)precise;
  std::this_thread::sleep_until(
      std::chrono::steady_clock::time_point(std::chrono::nanoseconds(end_ns)));
}

// A rank's communication thread for synthetic chunks: runs them one after another in
// issue order and records each as a comm span.
class ChunkRunner {
 public:
  ChunkRunner(RankRecorder& recorder, BusyWork* busy) : recorder_(recorder), busy_(busy) {
    thread_ = std::thread([this] { loop(); });
  }
  ~ChunkRunner() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  // Queues chunk `chunk` of `ns`, ready on the ideal schedule at `ready_ns`. In sleep
  // mode a chunk ready before the previous one ends follows it back to back on the
  // ideal schedule; one ready later starts when this thread picks it up.
  void submit(int step, int chunk, std::int64_t ns, std::int64_t ready_ns) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back({step, chunk, ns, ready_ns});
      ++pending_;
    }
    cv_.notify_all();
  }
  // Blocks until every submitted chunk has run; records the blocked time as a wait span.
  void drain(int step) {
    ScopedSpan span(recorder_, Lane::kWait, SpanKind::kWait, step);
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  struct Chunk {
    int step, index;
    std::int64_t ns, ready_ns;
  };
  void loop() {
    std::unique_lock lock(mutex_);
    for (;;) {
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      const Chunk chunk = queue_.front();
      queue_.pop_front();
      lock.unlock();
      {
        ScopedSpan span(recorder_, Lane::kComm, SpanKind::kOther, chunk.step, chunk.index);
        if (busy_) {
          busy_->comm_for(chunk.ns);
        } else {
          deadline_ns_ = (chunk.ready_ns <= deadline_ns_ ? deadline_ns_ : now_ns()) + chunk.ns;
          sleep_until_ns(deadline_ns_);
        }
      }
      lock.lock();
      --pending_;
      cv_.notify_all();
    }
  }
  RankRecorder& recorder_;
  BusyWork* busy_;
  std::int64_t deadline_ns_ = 0;  // ideal end of the last chunk; comm thread only
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  int pending_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

class SyntheticWorkload final : public Workload {
 public:
  explicit SyntheticWorkload(const SyntheticSpec& spec) : spec_(spec) {}

  std::string describe() const override {
    return spec_.to_string() + ", " + std::to_string(spec_.ranks) + " ranks";
  }
  nlohmann::json config_json() const override {
    return {{"workload", "synthetic"}, {"compute_ns", spec_.compute_ns}, {"comm_ns", spec_.comm_ns},
            {"chunks", spec_.chunks},  {"mode", mode_name(spec_.mode)},  {"ranks", spec_.ranks}};
  }

  Timeline run(Job& job, Scenario scenario, int steps) override {
    if (spec_.busy() && !busy_) busy_ = std::make_unique<BusyWork>();
    const std::size_t capacity = static_cast<std::size_t>(steps) * (spec_.chunks + 4) + 64;
    return job
        .run({.ranks = spec_.ranks, .span_capacity_per_lane = capacity},
             [&](RankEnv& env) {
               if (spec_.mode == SyntheticMode::kIdeal) {
                 std::int64_t clock_ns = now_ns();
                 for (int step = 0; step < steps; ++step) {
                   clock_ns = ideal_iteration(scenario, step, env.recorder, clock_ns);
                 }
                 return std::string();
               }
               ChunkRunner runner(env.recorder, busy_.get());
               for (int step = 0; step < steps; ++step) {
                 iteration(scenario, step, env.recorder, runner);
               }
               return std::string();
             })
        .timeline;
  }

 private:
  std::int64_t compute_chunk_ns(int i) const { return share(spec_.compute_ns, i); }
  std::int64_t comm_chunk_ns(int i) const { return share(spec_.comm_ns, i); }
  // Chunk i's part of `total`, so that the chunks add up to it exactly.
  std::int64_t share(std::int64_t total, int i) const {
    return total * (i + 1) / spec_.chunks - total * i / spec_.chunks;
  }

  // Runs compute chunk `chunk`; `deadline_ns` is the ideal end of the previous one and
  // becomes this one's.
  void compute(int step, int chunk, RankRecorder& recorder, std::int64_t& deadline_ns) const {
    ScopedSpan span(recorder, Lane::kCompute, SpanKind::kKernel, step, chunk);
    deadline_ns += compute_chunk_ns(chunk);
    if (busy_) {
      busy_->compute_for(compute_chunk_ns(chunk));
    } else {
      sleep_until_ns(deadline_ns);
    }
  }

  void iteration(Scenario scenario, int step, RankRecorder& recorder, ChunkRunner& runner) const {
    const int n = spec_.chunks;
    const bool computes = scenario != Scenario::kCommOnly;
    const bool communicates = scenario != Scenario::kComputeOnly;
    // The ideal schedule starts now; in busy mode only the order matters.
    std::int64_t deadline_ns = now_ns();
    for (int i = 0; i < n && computes; ++i) {
      compute(step, i, recorder, deadline_ns);
      if (scenario == Scenario::kOverlapped) {
        runner.submit(step, i, comm_chunk_ns(i), deadline_ns);
      }
    }
    if (scenario == Scenario::kSequential || scenario == Scenario::kCommOnly) {
      for (int i = 0; i < n; ++i) runner.submit(step, i, comm_chunk_ns(i), deadline_ns);
    }
    if (communicates) runner.drain(step);
    if (computes) {
      // Closes the iteration after communication, as an optimizer step would. No work.
      ScopedSpan span(recorder, Lane::kCompute, SpanKind::kOptimizer, step);
    }
  }

  // The ideal schedule of one iteration from `start_ns` on a virtual clock, as sleep mode
  // aims for it: compute chunks back to back; comm chunk i ready when compute chunk i
  // ends (overlapped) or all at the end of compute (sequential), run in issue order on
  // one comm lane; the wait from the end of compute to the end of communication; the
  // optimizer closes the iteration. Returns its end.
  std::int64_t ideal_iteration(Scenario scenario, int step, RankRecorder& recorder,
                               std::int64_t start_ns) const {
    const int n = spec_.chunks;
    const bool computes = scenario != Scenario::kCommOnly;
    const bool communicates = scenario != Scenario::kComputeOnly;
    auto record = [&](Lane lane, SpanKind kind, int tag, std::int64_t from, std::int64_t to) {
      recorder.record(Span{
          .lane = lane, .kind = kind, .step = step, .tag = tag, .start_ns = from, .end_ns = to});
    };
    std::int64_t t = start_ns, comm_end = start_ns;
    const auto run_comm = [&](int i, std::int64_t ready_ns) {
      const std::int64_t begin = std::max(ready_ns, comm_end);
      comm_end = begin + comm_chunk_ns(i);
      record(Lane::kComm, SpanKind::kOther, i, begin, comm_end);
    };
    for (int i = 0; i < n && computes; ++i) {
      record(Lane::kCompute, SpanKind::kKernel, i, t, t + compute_chunk_ns(i));
      t += compute_chunk_ns(i);
      if (scenario == Scenario::kOverlapped) run_comm(i, t);
    }
    if (scenario == Scenario::kSequential || scenario == Scenario::kCommOnly) {
      for (int i = 0; i < n; ++i) run_comm(i, t);
    }
    if (communicates) {
      record(Lane::kWait, SpanKind::kWait, -1, t, std::max(t, comm_end));
      t = std::max(t, comm_end);
    }
    if (computes) record(Lane::kCompute, SpanKind::kOptimizer, -1, t, t);
    return t;
  }

  SyntheticSpec spec_;
  std::unique_ptr<BusyWork> busy_;
};

}  // namespace

std::unique_ptr<Workload> make_synthetic_workload(const SyntheticSpec& spec) {
  return std::make_unique<SyntheticWorkload>(spec);
}

}  // namespace tandem
