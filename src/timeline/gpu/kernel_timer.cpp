// KernelTimer (kernel_timer.h): CUPTI activity records, or CUDA events.
#include "timeline/gpu/kernel_timer.h"

#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <mutex>

#include "core/clock.h"
#include "core/error.h"
#include "cuda/check.h"
#include "cuda/event_clock.h"

namespace tandem {

namespace {

void check_cuda(cudaError_t status, const char* call) { check_cuda_status(status, call); }

std::string cupti_text(CUptiResult result) {
  const char* text = nullptr;
  if (cuptiGetResultString(result, &text) != CUPTI_SUCCESS || text == nullptr) {
    return "CUPTI error " + std::to_string(static_cast<int>(result));
  }
  return text;
}

void check_cupti(CUptiResult result, const char* call) {
  if (result != CUPTI_SUCCESS)
    throw RuntimeError(std::string(call) + " failed: " + cupti_text(result));
}

// One kernel as CUPTI reported it (CUPTI's clock).
struct KernelRecord {
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::uint32_t device = 0;
  std::string name;
};

// Note [CUPTI buffers]: CUPTI's activity API is process-wide and calls the two buffer
// callbacks with no user pointer (from its own threads, or from the thread that flushes),
// so every kernel record of every device goes to one sink under g_sink_mutex. Timers
// share the API, one per device: the first start() enables the kernel activity, the last
// stop() disables it, and each stop() takes its own device's records out of the sink.
// g_state_mutex guards the sharing (never held while flushing, which runs the callbacks).
constexpr std::size_t kBufferBytes = 8 << 20;
constexpr std::size_t kBufferAlign = 8;
std::mutex g_sink_mutex;
std::vector<KernelRecord> g_sink;
std::mutex g_state_mutex;
bool g_callbacks_registered = false;  // under g_state_mutex
int g_collecting = 0;                 // timers between start() and stop(), under g_state_mutex
std::vector<int> g_devices;           // devices with a CUPTI timer, under g_state_mutex

// Takes the records of `device` out of the sink.
std::vector<KernelRecord> take_records(int device) {
  std::vector<KernelRecord> mine;
  std::lock_guard lock(g_sink_mutex);
  std::erase_if(g_sink, [&](KernelRecord& r) {
    if (static_cast<int>(r.device) != device) return false;
    mine.push_back(std::move(r));
    return true;
  });
  return mine;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<KernelRecord> records;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    records.push_back({.start = k->start,
                       .end = k->end,
                       .device = k->deviceId,
                       .name = k->name != nullptr ? k->name : "?"});
  }
  std::free(buffer);
  std::lock_guard lock(g_sink_mutex);
  g_sink.insert(g_sink.end(), records.begin(), records.end());
}

// host_ns - cupti_ns, from the tightest of a few bracketing reads.
std::int64_t cupti_offset_ns() {
  std::int64_t best_width = INT64_MAX;
  std::int64_t best_offset = 0;
  for (int i = 0; i < 8; ++i) {
    std::uint64_t gpu = 0;
    const std::int64_t before = now_ns();
    check_cupti(cuptiGetTimestamp(&gpu), "cuptiGetTimestamp");
    const std::int64_t after = now_ns();
    if (after - before < best_width) {
      best_width = after - before;
      best_offset = before + (after - before) / 2 - static_cast<std::int64_t>(gpu);
    }
  }
  return best_offset;
}

// A forced flush hands back records of kernels still running, with unknown (0) times,
// and never delivers them again: every device that has a timer finishes its work first,
// not only this one. Leaves `current` as the current device.
void synchronize_timed_devices(int current) {
  std::vector<int> devices;
  {
    std::lock_guard lock(g_state_mutex);
    devices = g_devices;
  }
  for (int device : devices) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice (kernel timer flush)");
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (kernel timer flush)");
  }
  check_cuda(cudaSetDevice(current), "cudaSetDevice (kernel timer)");
}
}  // namespace

struct KernelTimer::State {
  int device = 0;
  // CUPTI mode.
  std::int64_t offset_start_ns = 0;
  std::int64_t start_host_ns = 0;
  bool collecting = false;
  // Events mode (and steps in both modes): events created on demand, kept for reuse.
  struct Mark {
    cudaEvent_t begin = nullptr;
    cudaEvent_t end = nullptr;
    Lane lane = Lane::kCompute;
    SpanKind kind = SpanKind::kKernel;
    std::int32_t tag = -1;
    double flops = 0;
    bool marker = false;  // zero length, made in both modes
  };
  std::vector<Mark> regions;
  std::size_t regions_used = 0;
  std::vector<std::pair<cudaEvent_t, std::int32_t>> steps;
  std::size_t steps_used = 0;
  std::unique_ptr<cuda::EventClock> clock;  // events mode (cuda/event_clock.h)

  ~State() {
    for (auto& r : regions) {
      cudaEventDestroy(r.begin);
      cudaEventDestroy(r.end);
    }
    for (auto& s : steps) cudaEventDestroy(s.first);
  }

  cudaEvent_t make_event() {
    cudaEvent_t e = nullptr;
    check_cuda(cudaEventCreate(&e), "cudaEventCreate (kernel timer)");
    return e;
  }

  // Events mode: the host time when the GPU passed `e`; the clock is anchored at start(),
  // after a device synchronization.
  std::int64_t host_ns(cudaEvent_t e) const { return clock->to_host_ns(e); }
};

bool KernelTimer::is_comm_kernel(const std::string& name) {
  return name.find("ncclKernel_") != std::string::npos ||
         name.find("ncclDevKernel_") != std::string::npos ||
         name.find("tandem_emulated_ring") != std::string::npos ||
         name.find("tandem_shared_") != std::string::npos;
}

KernelTimer::KernelTimer(KernelTimerOptions options) : state_(std::make_unique<State>()) {
  state_->device = options.device;
  check_cuda(cudaSetDevice(options.device), "cudaSetDevice (kernel timer)");
  if (!options.prefer_cupti) {
    fallback_reason_ = "CUPTI not requested";
    return;
  }
  std::lock_guard lock(g_state_mutex);
  if (std::find(g_devices.begin(), g_devices.end(), options.device) != g_devices.end()) {
    fallback_reason_ =
        "another kernel timer uses CUPTI on device " + std::to_string(options.device);
    return;
  }
  if (!g_callbacks_registered) {
    const CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    if (r != CUPTI_SUCCESS) {
      fallback_reason_ = "cuptiActivityRegisterCallbacks: " + cupti_text(r);
      return;
    }
    g_callbacks_registered = true;
  }
  std::uint64_t t = 0;
  if (const CUptiResult r = cuptiGetTimestamp(&t); r != CUPTI_SUCCESS) {
    fallback_reason_ = "cuptiGetTimestamp: " + cupti_text(r);
    return;
  }
  g_devices.push_back(options.device);
  source_ = KernelTimingSource::kCupti;
}

// Leaves the shared activity API (Note [CUPTI buffers]): the last collector disables it.
void KernelTimer::stop_collecting() {
  if (!state_->collecting) return;
  state_->collecting = false;
  std::lock_guard lock(g_state_mutex);
  if (--g_collecting == 0) {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    std::lock_guard sink(g_sink_mutex);
    g_sink.clear();  // nobody collects: records still arriving belong to nobody
  }
}

KernelTimer::~KernelTimer() {
  if (source_ != KernelTimingSource::kCupti) return;
  stop_collecting();
  std::lock_guard lock(g_state_mutex);
  std::erase(g_devices, state_->device);
}

std::string KernelTimer::source_name() const {
  if (source_ == KernelTimingSource::kCupti) return "cupti (activity records)";
  return "cuda events (CUPTI unavailable: " + fallback_reason_ + ")";
}

void KernelTimer::start() {
  State& s = *state_;
  check_cuda(cudaSetDevice(s.device), "cudaSetDevice (kernel timer)");
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (kernel timer start)");
  s.regions_used = 0;
  s.steps_used = 0;
  if (!s.clock) s.clock = std::make_unique<cuda::EventClock>(s.device);
  s.clock->reanchor();
  if (source_ != KernelTimingSource::kCupti) return;
  stop_collecting();  // a start() after a start(): begin afresh
  // This device's records of an earlier run still in CUPTI's buffers belong to nobody
  // (best effort: before the first enable there is nothing to flush).
  synchronize_timed_devices(s.device);
  (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  (void)take_records(s.device);
  std::lock_guard lock(g_state_mutex);
  if (g_collecting == 0) {
    if (const CUptiResult r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        r != CUPTI_SUCCESS) {
      // Nothing collected yet: time this run (and later ones) with events instead.
      fallback_reason_ = "cuptiActivityEnable(CONCURRENT_KERNEL): " + cupti_text(r);
      source_ = KernelTimingSource::kEvents;
      std::erase(g_devices, s.device);
      return;
    }
  }
  ++g_collecting;
  s.collecting = true;
  s.offset_start_ns = cupti_offset_ns();
  s.start_host_ns = now_ns();
}

void KernelTimer::mark_step(cudaStream_t stream, std::int32_t step) {
  State& s = *state_;
  if (s.steps_used == s.steps.size()) s.steps.emplace_back(s.make_event(), 0);
  auto& mark = s.steps[s.steps_used++];
  mark.second = step;
  check_cuda(cudaEventRecord(mark.first, stream), "cudaEventRecord (step mark)");
}

void KernelTimer::marker(cudaStream_t stream, Lane lane, SpanKind kind) {
  add_region(stream, lane, kind, -1, 0, /*marker=*/true);
}

KernelTimer::Region KernelTimer::begin(cudaStream_t stream, Lane lane, SpanKind kind,
                                       std::int32_t tag, double flops) {
  if (source_ == KernelTimingSource::kCupti) return {};
  return add_region(stream, lane, kind, tag, flops, false);
}

KernelTimer::Region KernelTimer::add_region(cudaStream_t stream, Lane lane, SpanKind kind,
                                            std::int32_t tag, double flops, bool marker) {
  State& s = *state_;
  if (s.regions_used == s.regions.size()) {
    State::Mark m;
    m.begin = s.make_event();
    try {
      m.end = s.make_event();
    } catch (...) {
      cudaEventDestroy(m.begin);
      throw;
    }
    s.regions.push_back(m);
  }
  State::Mark& m = s.regions[s.regions_used];
  m.lane = lane;
  m.kind = kind;
  m.tag = tag;
  m.flops = flops;
  m.marker = marker;
  check_cuda(cudaEventRecord(m.begin, stream), "cudaEventRecord (region begin)");
  return {s.regions_used++};
}

void KernelTimer::end(cudaStream_t stream, Region region) {
  if (source_ == KernelTimingSource::kCupti) return;
  State& s = *state_;
  if (region.index >= s.regions_used)
    throw RuntimeError("KernelTimer::end of a region never begun");
  check_cuda(cudaEventRecord(s.regions[region.index].end, stream), "cudaEventRecord (region end)");
}

std::vector<Span> KernelTimer::stop(NameTable* names) {
  State& s = *state_;
  check_cuda(cudaSetDevice(s.device), "cudaSetDevice (kernel timer)");
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (kernel timer stop)");
  std::vector<Span> spans;
  if (source_ == KernelTimingSource::kCupti && s.collecting) {
    synchronize_timed_devices(s.device);
    check_cupti(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    const std::vector<KernelRecord> records = take_records(s.device);
    stop_collecting();
    const std::int64_t offset_stop = cupti_offset_ns();
    const std::int64_t stop_host = now_ns();
    // The offset, interpolated linearly in host time between start() and stop().
    auto to_host = [&](std::uint64_t t) {
      const auto raw = static_cast<std::int64_t>(t) + s.offset_start_ns;
      const double span_ns =
          static_cast<double>(std::max<std::int64_t>(1, stop_host - s.start_host_ns));
      const double f = std::clamp(static_cast<double>(raw - s.start_host_ns) / span_ns, 0.0, 1.0);
      return raw + std::llround(f * static_cast<double>(offset_stop - s.offset_start_ns));
    };
    for (const KernelRecord& r : records) {
      if (r.start == 0 || r.end == 0 || r.end < r.start) continue;  // incomplete record
      Span span;
      const bool comm = is_comm_kernel(r.name);
      span.lane = comm ? Lane::kComm : Lane::kCompute;
      span.kind = comm ? SpanKind::kAllreduce : SpanKind::kKernel;
      span.start_ns = to_host(r.start);
      span.end_ns = to_host(r.end);
      if (names != nullptr) span.name = names->intern(r.name);
      spans.push_back(span);
    }
  }
  // Regions (events mode; CUPTI mode has markers only).
  for (std::size_t i = 0; i < s.regions_used; ++i) {
    const State::Mark& m = s.regions[i];
    Span span;
    span.lane = m.lane;
    span.kind = m.kind;
    span.tag = m.tag;
    span.flops = m.flops;
    span.start_ns = s.host_ns(m.begin);
    span.end_ns = m.marker ? span.start_ns : s.host_ns(m.end);
    spans.push_back(span);
  }
  // Steps from the marks.
  std::vector<std::pair<std::int64_t, std::int32_t>> marks;
  for (std::size_t i = 0; i < s.steps_used; ++i) {
    marks.emplace_back(s.host_ns(s.steps[i].first), s.steps[i].second);
  }
  std::sort(marks.begin(), marks.end());
  // By the span's midpoint: CUPTI's times and the marks' (events) may differ by the few
  // microseconds of the anchors' wake-up, which must not move a kernel that starts right
  // after a mark into the step before.
  for (Span& span : spans) {
    const std::int64_t mid = span.start_ns + span.duration_ns() / 2;
    auto it = std::upper_bound(marks.begin(), marks.end(), std::make_pair(mid, INT32_MAX));
    span.step = it == marks.begin() ? -1 : std::prev(it)->second;
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  return spans;
}

}  // namespace tandem
