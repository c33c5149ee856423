// What the device backends (nccl, shared, emulated) share: a ProgressCommunicator whose buffers are
// in GPU memory and whose operations are enqueued on a communication stream, with c10d's
// meaning of completion (comm/work.h).
//
// At issue (on the caller's thread, prepare + start_group): an event is recorded on the
// bound stream (Communicator::bind_stream: the compute stream that wrote the data), the
// communication stream waits on it, a start event is recorded, the backend enqueues the
// operation (enqueue()), and a done event is recorded after it. The Work's wait() makes
// the bound stream wait on the done event; the host does not block.
// On the communication thread (the skeleton's test): the done event is polled with
// cudaEventQuery; once it fired, the span's start and end come from the two events on the
// host clock (cuda/event_clock.h) and the Work completes. The backend's health() is asked
// on every poll (nccl: ncclCommGetAsyncError) and fails the operation when it answers.
// Timeouts: an operation past the timeout calls on_timeout() once (nccl: ncclCommAbort,
// which ends its kernels) and fails with TimeoutError naming it; the backend says with
// can_cancel() whether that frees its buffers.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/progress_communicator.h"
#include "cuda/event_clock.h"
#include "cuda/resources.h"

namespace tandem {

class DeviceCommunicator : public ProgressCommunicator {
 public:
  // On CUDA device `device` (current for the constructing thread afterwards).
  DeviceCommunicator(ProgressOptions options, int device);
  ~DeviceCommunicator() override;

  MemoryKind memory() const override { return MemoryKind::kDevice; }
  int device() const override { return device_; }
  void bind_stream(ComputeStream stream) override { consumer_ = stream; }
  // The communication stream.
  cudaStream_t stream() const { return stream_.get(); }

 protected:
  // Enqueues `ops` on stream() (one group: nccl launches them together). Called on the
  // issuing thread with the device current, between the start and done events.
  virtual void enqueue(std::span<Op* const> ops) = 0;
  // "" while healthy; otherwise why every pending operation fails. Communication thread.
  virtual std::string health() { return {}; }
  // An operation is overdue: end what can be ended (nccl: abort). Communication thread.
  virtual void on_timeout() {}
  // After on_timeout(), the backend's kernels no longer touch the buffers.
  virtual bool can_cancel() const { return false; }

  // Point to point with this rank itself, as device copies on stream(): a send is copied
  // into a staging buffer until the receive with its tag comes (NCCL refuses a send to
  // self that is not in the same group as its receive). True when `op` was such a send or
  // receive and is enqueued. Issuing thread, with the device current.
  bool enqueue_self_p2p(Op& op);
  // The device has memory pools: buffers can be allocated and freed in stream order.
  bool stream_ordered_alloc() const { return stream_ordered_alloc_; }
  // Device-to-device copy on stream() (nothing when empty or in place).
  void copy_on_stream(void* dst, const void* src, std::size_t bytes);

  bool starts_on_issue() const final { return true; }
  void prepare(Op& op) final;
  void start(Op& op) final;
  void start_group(std::span<Op* const> ops) final;
  bool test(Op& op) final;
  bool cancel(Op& op) final;
  void idle(std::size_t in_flight, int idle_polls) final;
  void on_thread_start() final;

 private:
  const int device_;
  cuda::Stream stream_;
  cuda::EventClock clock_;  // communication thread only, after construction
  ComputeStream consumer_ = nullptr;
  bool timed_out_ = false;  // on_timeout() was called; communication thread only
  bool stream_ordered_alloc_ = false;  // the device has memory pools (cudaMallocAsync)
  // A send to self waiting for its receive; issuing thread only.
  struct Staged {
    int tag = 0;
    float* data = nullptr;
    std::size_t count = 0;
  };
  std::vector<Staged> staged_;
};

}  // namespace tandem
