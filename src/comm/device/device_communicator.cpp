// The device backends' shared machinery (device_communicator.h).
#include "comm/device/device_communicator.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "cuda/check.h"

namespace tandem {

namespace {

// Polling: the span times come from events, so the poll interval only delays the host
// Work (and synchronize()); a short sleep keeps the thread off the cores compute uses.
constexpr auto kPollSleep = std::chrono::microseconds(20);
constexpr std::int64_t kReanchorNs = 1'000'000'000;
constexpr std::int64_t kQuietWakeNs = 100'000'000;

// An operation's events, shared by its state and by its Work's stream wait (the Work may
// outlive the operation). Destroying an event whose record has not completed is allowed:
// CUDA releases it once the stream passes it.
struct OpEvents {
  cudaEvent_t ready = nullptr;  // on the bound stream: the data is written
  cudaEvent_t start = nullptr;  // on the communication stream, timing
  cudaEvent_t done = nullptr;
  OpEvents() {
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    TANDEM_CUDA_CHECK(cudaEventCreate(&start));
    TANDEM_CUDA_CHECK(cudaEventCreate(&done));
  }
  ~OpEvents() {
    for (cudaEvent_t e : {ready, start, done}) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  }
  OpEvents(const OpEvents&) = delete;
  OpEvents& operator=(const OpEvents&) = delete;
};

struct DeviceOpState final : OpState {
  std::shared_ptr<OpEvents> events;
};

const OpEvents& events_of(const Op& op) {
  return *static_cast<const DeviceOpState&>(*op.state).events;
}

int make_current(int device) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

bool has_memory_pools(int device) {
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return pools != 0;
}

}  // namespace

DeviceCommunicator::DeviceCommunicator(ProgressOptions options, int device)
    : ProgressCommunicator(options),
      device_(make_current(device)),
      clock_(device),
      stream_ordered_alloc_(has_memory_pools(device)) {}

// The derived backend stopped its thread and synchronized stream() before this runs.
DeviceCommunicator::~DeviceCommunicator() {
  for (const Staged& s : staged_) cudaFree(s.data);
}

void DeviceCommunicator::copy_on_stream(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
}

bool DeviceCommunicator::enqueue_self_p2p(Op& op) {
  if ((op.kind != SpanKind::kSend && op.kind != SpanKind::kRecv) || op.peer != rank()) {
    return false;
  }
  if (op.kind == SpanKind::kSend) {
    Staged staged{.tag = op.tag, .count = op.input_count};
    if (op.input_count > 0) {
      void* data = nullptr;
      const std::size_t bytes = op.input_count * sizeof(float);
      TANDEM_CUDA_CHECK(stream_ordered_alloc_ ? cudaMallocAsync(&data, bytes, stream())
                                              : cudaMalloc(&data, bytes));
      staged.data = static_cast<float*>(data);
      copy_on_stream(staged.data, op.input, bytes);
    }
    staged_.push_back(staged);
    return true;
  }
  const auto it = std::find_if(staged_.begin(), staged_.end(),
                               [&](const Staged& s) { return s.tag == op.tag; });
  if (it == staged_.end()) {
    throw RuntimeError(std::string(backend_name()) + ": rank " + std::to_string(rank()) +
                       " receives from itself (tag " + std::to_string(op.tag) +
                       ") before sending to itself");
  }
  if (it->count != op.output_count) {
    throw RuntimeError("size mismatch: rank " + std::to_string(rank()) + " sends " +
                       std::to_string(it->count) + " elements to itself and receives " +
                       std::to_string(op.output_count));
  }
  copy_on_stream(op.output, it->data, op.output_count * sizeof(float));
  if (it->data != nullptr) {
    if (stream_ordered_alloc_) {
      TANDEM_CUDA_CHECK(cudaFreeAsync(it->data, stream()));
    } else {
      TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream()));
      TANDEM_CUDA_CHECK(cudaFree(it->data));
    }
  }
  staged_.erase(it);
  return true;
}

void DeviceCommunicator::prepare(Op& op) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  auto state = std::make_unique<DeviceOpState>();
  state->events = std::make_shared<OpEvents>();
  TANDEM_CUDA_CHECK(cudaEventRecord(state->events->ready, consumer_));
  op.work->set_stream_wait(
      [events = state->events, consumer = consumer_, device = device_] {
        TANDEM_CUDA_CHECK(cudaSetDevice(device));
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(consumer, events->done, 0));
      });
  op.state = std::move(state);
}

void DeviceCommunicator::start(Op& op) {
  Op* one = &op;
  start_group(std::span<Op* const>(&one, 1));
}

void DeviceCommunicator::start_group(std::span<Op* const> ops) {
  TANDEM_CUDA_CHECK(cudaSetDevice(device_));
  const cudaStream_t s = stream();
  for (Op* op : ops) {
    const OpEvents& e = events_of(*op);
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(s, e.ready, 0));
    TANDEM_CUDA_CHECK(cudaEventRecord(e.start, s));
  }
  enqueue(ops);
  for (Op* op : ops) TANDEM_CUDA_CHECK(cudaEventRecord(events_of(*op).done, s));
}

void DeviceCommunicator::on_thread_start() {
  // The events and the clock belong to the communicator's device; should this fail, the
  // first event query fails the operation with CUDA's own error.
  (void)cudaSetDevice(device_);
}

bool DeviceCommunicator::test(Op& op) {
  if (const std::string error = health(); !error.empty()) throw RuntimeError(error);
  const OpEvents& e = events_of(op);
  const cudaError_t status = cudaEventQuery(e.done);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // cudaEventQuery's "not ready" is no sticky error
    return false;
  }
  check_cuda_status(status, "cudaEventQuery (collective done)");
  op.start_ns = clock_.to_host_ns(e.start);
  op.end_ns = clock_.to_host_ns(e.done);
  return true;
}

bool DeviceCommunicator::cancel(Op& op) {
  (void)op;
  if (!timed_out_) {
    timed_out_ = true;
    on_timeout();
  }
  return can_cancel();
}

void DeviceCommunicator::idle(std::size_t in_flight, int idle_polls) {
  (void)idle_polls;
  if (in_flight > 0) {
    std::this_thread::sleep_for(kPollSleep);
    return;
  }
  // Nothing in flight: re-anchor the event clock now and then (cuda/event_clock.h).
  if (now_ns() - clock_.anchored_at_ns() > kReanchorNs) {
    try {
      clock_.reanchor();
    } catch (const std::exception&) {
      // A broken context shows up as a failed event query of the next collective.
    }
  }
  wait_for_wake(now_ns() + kQuietWakeNs);
}

}  // namespace tandem
