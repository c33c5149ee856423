// The contract of communicators over GPU memory (nccl, and the single-GPU emulated ring).
//
// Same rules as Communicator (comm/communicator.h), moved onto CUDA streams:
// - A collective is enqueued on the backend's communication stream after the event
//   `ready` (recorded on the compute stream once the data is written), so the host
//   never synchronizes on the hot path: the call returns a DeviceWork at once.
// - DeviceWork::done_event() is recorded on the communication stream after the
//   collective; the compute stream waits on it with cudaStreamWaitEvent before it
//   reads the result. The host Work side (wait/test/timeout) is completed by the
//   backend's progress thread once the event has fired, with the collective's start
//   and end on the spans' clock and the error, if any, stored and rethrown.
// - All ranks issue the same collectives in the same order.
// - Bytes in OpInfo are filled by the backend; step, tag and name are the caller's.
// - A collective not complete after the timeout aborts the communicator and fails its
//   Work with a message naming rank, collective, bucket, bytes and elapsed time.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "comm/communicator.h"
#include "comm/work.h"

namespace tandem {

// Element types a device collective moves (the gradient's precision).
enum class DeviceDtype : std::uint8_t { kFloat32, kFloat16, kBfloat16 };
std::size_t element_size(DeviceDtype dtype);

class DeviceWork : public Work {
 public:
  using Work::Work;
  virtual ~DeviceWork() = default;
  // Recorded on the communication stream after the collective; owned by the Work.
  virtual cudaEvent_t done_event() const = 0;
};
using DeviceWorkPtr = std::shared_ptr<DeviceWork>;

class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int device() const = 0;                     // CUDA ordinal this rank uses
  virtual std::string_view backend_name() const = 0;  // "nccl", "emulated-ring"
  // True when no real peer exists (the single-GPU emulation): every output says so.
  virtual bool emulated() const = 0;
  // One line for outputs: library version, channel/CTA limits, blocks, ranks.
  virtual std::string describe() const = 0;
  virtual cudaStream_t stream() const = 0;

  // data := op over ranks of data (count elements of dtype, in place).
  virtual DeviceWorkPtr allreduce(void* data, std::size_t count, DeviceDtype dtype, ReduceOp op,
                                  cudaEvent_t ready, OpInfo info = {}) = 0;
  // Collectives issued between group_start() and group_end() launch together (an NCCL
  // group); each still returns its own DeviceWork.
  virtual void group_start() = 0;
  virtual void group_end() = 0;

  // Starts a clean shutdown that the destructor completes. NCCL's finalize completes only
  // once every rank of a node has started it, so a thread that owns several ranks'
  // communicators calls this on all of them before destroying any
  // (destroy_device_communicators in device_backends.h).
  virtual void begin_shutdown() {}
  // Ends the communicator now, failing what is pending, so that the peers' collectives
  // fail instead of waiting for this rank (a rank that failed). Destruction stays safe.
  virtual void abort() {}

  // Where this rank's comm spans go (may be null). Set before issuing.
  void set_recorder(RankRecorder* recorder) { recorder_ = recorder; }

 protected:
  RankRecorder* recorder() const { return recorder_; }

 private:
  RankRecorder* recorder_ = nullptr;
};

}  // namespace tandem
