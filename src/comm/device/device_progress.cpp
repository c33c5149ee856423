// The device backends' shared machinery: event clock, DeviceWork, progress thread.
#include "comm/device/device_progress.h"

#include <cmath>
#include <exception>
#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"

namespace tandem {

namespace {

// Polling: the span times come from events, so the poll interval only delays the host
// Work (and Work::wait); a short sleep keeps the thread off the cores compute uses.
constexpr auto kPollSleep = std::chrono::microseconds(20);
constexpr std::int64_t kReanchorNs = 1'000'000'000;

}  // namespace

void check_cuda_status(cudaError_t status, const char* call) {
  if (status != cudaSuccess) {
    throw RuntimeError(std::string(call) + " failed: " + cudaGetErrorName(status) + ": " +
                       cudaGetErrorString(status));
  }
}

// ---- EventClock ----

EventClock::EventClock(int device) : device_(device) {
  check_cuda_status(cudaSetDevice(device_), "cudaSetDevice");
  check_cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                    "cudaStreamCreateWithFlags (event clock)");
  const cudaError_t status = cudaEventCreate(&anchor_);
  if (status != cudaSuccess) {
    cudaStreamDestroy(stream_);
    check_cuda_status(status, "cudaEventCreate (event clock)");
  }
  try {
    reanchor();
  } catch (...) {
    cudaEventDestroy(anchor_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

EventClock::~EventClock() {
  cudaEventDestroy(anchor_);
  cudaStreamDestroy(stream_);
}

void EventClock::reanchor() {
  check_cuda_status(cudaEventRecord(anchor_, stream_), "cudaEventRecord (event clock anchor)");
  check_cuda_status(cudaEventSynchronize(anchor_), "cudaEventSynchronize (event clock anchor)");
  anchor_host_ns_ = now_ns();
}

std::int64_t EventClock::to_host_ns(cudaEvent_t event) const {
  float ms = 0;
  check_cuda_status(cudaEventElapsedTime(&ms, anchor_, event), "cudaEventElapsedTime");
  return anchor_host_ns_ + std::llround(static_cast<double>(ms) * 1e6);
}

// ---- CudaDeviceWork ----

CudaDeviceWork::CudaDeviceWork(OpInfo info) : DeviceWork(info) {
  check_cuda_status(cudaEventCreate(&start_), "cudaEventCreate (collective start)");
  const cudaError_t status = cudaEventCreate(&done_);
  if (status != cudaSuccess) {
    cudaEventDestroy(start_);
    check_cuda_status(status, "cudaEventCreate (collective done)");
  }
}

// Destroying an event whose record has not completed is allowed: CUDA releases it once
// the stream passes it, and waits enqueued on it earlier are unaffected.
CudaDeviceWork::~CudaDeviceWork() {
  cudaEventDestroy(start_);
  cudaEventDestroy(done_);
}

// ---- DeviceProgress ----

DeviceProgress::DeviceProgress(DeviceProgressOptions options)
    : options_(std::move(options)), clock_(options_.device) {
  thread_ = std::thread([this] { run(); });
}

DeviceProgress::~DeviceProgress() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void DeviceProgress::watch(CudaDeviceWorkPtr work, RankRecorder* recorder) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back({.work = std::move(work), .recorder = recorder, .issued_ns = now_ns()});
  }
  cv_.notify_all();
}

std::string DeviceProgress::broken() const {
  std::lock_guard lock(mutex_);
  return broken_;
}

void DeviceProgress::run() {
  // Events and the clock belong to the communicator's device.
  const cudaError_t set = cudaSetDevice(options_.device);
  for (;;) {
    {
      std::unique_lock lock(mutex_);
      if (pending_.empty()) {
        if (stopping_) return;
        // Idle: re-anchor the event clock now and then (Note [event clock]).
        if (set == cudaSuccess && now_ns() - clock_.anchored_at_ns() > kReanchorNs) {
          lock.unlock();
          try {
            clock_.reanchor();
          } catch (const std::exception&) {
            // A broken context shows up as a failed event query of the next collective.
          }
          lock.lock();
          continue;
        }
        cv_.wait_for(lock, std::chrono::milliseconds(100));
        continue;
      }
    }
    if (set != cudaSuccess) {
      fail_all("rank " + std::to_string(options_.rank) + ": cudaSetDevice(" +
                   std::to_string(options_.device) + ") failed on the " + options_.backend +
                   " progress thread: " + cudaGetErrorString(set),
               false);
      continue;
    }
    if (!poll_once()) std::this_thread::sleep_for(kPollSleep);
  }
}

bool DeviceProgress::poll_once() {
  bool completed = false;
  for (;;) {
    Pending front;
    std::string broken;
    {
      std::lock_guard lock(mutex_);
      if (pending_.empty()) return completed;
      front = pending_.front();
      broken = broken_;
    }
    if (!broken.empty()) {  // issued after the communicator broke
      fail_all(broken, false);
      return true;
    }
    if (options_.health) {
      const std::string error = options_.health();
      if (!error.empty()) {
        fail_all("rank " + std::to_string(options_.rank) + ": " + front.work->info().describe() +
                     " failed: " + error,
                 false);
        return true;
      }
    }
    const cudaError_t status = cudaEventQuery(front.work->done_event());
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // cudaEventQuery's "not ready" is no sticky error
      const std::int64_t elapsed = now_ns() - front.issued_ns;
      if (elapsed > options_.timeout.count()) {
        std::string message =
            "rank " + std::to_string(options_.rank) + ": " + front.work->info().describe() +
            " not complete after " + format_duration_ns(static_cast<double>(elapsed)) +
            " (timeout " + format_duration_ns(static_cast<double>(options_.timeout.count())) +
            ", " + options_.backend + " on device " + std::to_string(options_.device) + ")";
        if (options_.on_timeout) {
          try {
            options_.on_timeout();
            message += "; communicator aborted";
          } catch (const std::exception& e) {
            message += std::string("; aborting the communicator failed: ") + e.what();
          }
        }
        fail_all(message, /*timed_out=*/true);
        return true;
      }
      return completed;
    }
    if (status != cudaSuccess) {
      fail_all("rank " + std::to_string(options_.rank) + ": " + front.work->info().describe() +
                   " failed: cudaEventQuery: " + cudaGetErrorName(status) + ": " +
                   cudaGetErrorString(status),
               false);
      return true;
    }
    {
      std::lock_guard lock(mutex_);
      pending_.pop_front();
    }
    complete(front);
    completed = true;
  }
}

// The span, then the Work (a waiter sees both). Event times can fail only on a broken
// context; then the Work fails instead.
void DeviceProgress::complete(const Pending& p) {
  const OpInfo& info = p.work->info();
  std::int64_t start = 0;
  std::int64_t end = 0;
  try {
    start = clock_.to_host_ns(p.work->start_event());
    end = clock_.to_host_ns(p.work->done_event());
  } catch (const std::exception& e) {
    p.work->fail(std::make_exception_ptr(
                     RuntimeError("rank " + std::to_string(options_.rank) + ": " + info.describe() +
                                  ": reading its CUDA event times: " + e.what())),
                 now_ns());
    return;
  }
  if (p.recorder != nullptr) {
    p.recorder->record(info.comm_span(start, end));
  }
  p.work->mark_started(start);
  p.work->finish(end);
}

void DeviceProgress::fail_all(const std::string& first_message, bool timed_out) {
  std::deque<Pending> failed;
  {
    std::lock_guard lock(mutex_);
    failed.swap(pending_);
    if (broken_.empty()) broken_ = first_message;
  }
  const std::int64_t t = now_ns();
  bool first = true;
  for (const Pending& p : failed) {
    const std::string message = first ? first_message
                                      : "rank " + std::to_string(options_.rank) + ": " +
                                            p.work->info().describe() +
                                            " abandoned after an earlier failure: " + first_message;
    p.work->fail(first && timed_out ? std::make_exception_ptr(TimeoutError(message))
                                    : std::make_exception_ptr(RuntimeError(message)),
                 t);
    first = false;
  }
}

}  // namespace tandem
