// The emulated ring (emulated_ring.h): rank 0's side of a ring all-reduce over P peers,
// on one GPU, with reduce-copy kernels on the communication stream.
//
// Note [emulated ring]: in a ring all-reduce of S bytes over P ranks, each rank runs
// P-1 reduce-scatter steps (receive a chunk of S/P, add its own, pass it on) and P-1
// allgather steps (receive a finished chunk, keep it, pass it on). Rank 0 at
// reduce-scatter step k receives chunk c = (-k-1) mod P, summed over k+1 ranks; at
// allgather step k it receives the finished chunk (-k) mod P. With every peer holding
// the same data d, those messages are (k+1)·d[c] and P·d[c]. The emulation keeps P-1
// chunk-sized inbox buffers (the peers' side of the links) and runs one kernel per step:
// it consumes the inbox of this step (reduce: own[c] += inbox; copy: own[c] = inbox) and
// writes the inbox of the next step the way the left neighbour would have, computed from
// this rank's own copy of that chunk scaled to the neighbour's partial sum. Per element
// and step that is two reads and one write for the rank's own work plus one read and one
// write standing in for the neighbour's send: a real ring's local HBM traffic (the peer
// writes the inbox over the link), plus one read.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/device/device_progress.h"
#include "comm/device/emulated_ring.h"
#include "comm/device/emulated_ring_plan.h"
#include "core/error.h"

namespace tandem {

namespace {

constexpr int kThreads = 512;

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// One ring step (Note [emulated ring]). Element i of both ranges belongs to one thread,
// which reads inbox[i] before it writes outbox[i]: inbox and outbox may be the same
// buffer (P = 2). The name starts with tandem_emulated_ring: kernel timing
// (timeline/gpu/kernel_timer.h) classifies it as communication by that prefix.
template <typename T>
__global__ void tandem_emulated_ring_reduce_copy(T* own, const T* inbox, T* outbox,
                                                 std::size_t recv_offset, std::size_t recv_count,
                                                 int reduce, float recv_scale,
                                                 std::size_t next_offset, std::size_t next_count,
                                                 float next_factor) {
  const std::size_t n = recv_count > next_count ? recv_count : next_count;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    if (i < recv_count) {
      const float in = to_float(inbox[i]);
      const float v = reduce ? (to_float(own[recv_offset + i]) + in) * recv_scale : in;
      own[recv_offset + i] = from_float<T>(v);
    }
    if (i < next_count) outbox[i] = from_float<T>(to_float(own[next_offset + i]) * next_factor);
  }
}

class EmulatedRing final : public DeviceCommunicator {
 public:
  EmulatedRing(const DeviceCommOptions& options, int device)
      : device_(device),
        peers_(options.emulated_peers),
        blocks_(options.emulated_blocks > 0 ? options.emulated_blocks : kEmulatedDefaultBlocks) {
    check_cuda_status(cudaSetDevice(device_), "cudaSetDevice");
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_) != cudaSuccess) {
      (void)cudaGetLastError();
      pools = 0;
    }
    stream_ordered_alloc_ = pools != 0;
    check_cuda_status(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking),
                      "cudaStreamCreateWithFlags (emulated ring stream)");
    try {
      progress_ = std::make_unique<DeviceProgress>(DeviceProgressOptions{
          .rank = 0,
          .device = device_,
          .backend = "emulated ring",
          .timeout = options.timeout,
      });
    } catch (...) {
      cudaStreamDestroy(stream_);
      throw;
    }
  }

  ~EmulatedRing() override {
    progress_.reset();  // waits for what is in flight
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    if (inbox_ != nullptr) cudaFree(inbox_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return 0; }
  int size() const override { return 1; }
  int device() const override { return device_; }
  std::string_view backend_name() const override { return "emulated"; }
  bool emulated() const override { return true; }
  std::string describe() const override {
    return "emulated ring all-reduce: rank 0's side of a ring of " + std::to_string(peers_) +
           " peers on 1 GPU (device " + std::to_string(device_) + "), " + std::to_string(blocks_) +
           " blocks x " + std::to_string(kThreads) + " threads per reduce-copy kernel, " +
           std::to_string(2 * (peers_ - 1)) + " steps; no real interconnect (emulated)";
  }
  cudaStream_t stream() const override { return stream_; }

  DeviceWorkPtr allreduce(void* data, std::size_t count, DeviceDtype dtype, ReduceOp op,
                          cudaEvent_t ready, OpInfo info) override {
    if (const std::string broken = progress_->broken(); !broken.empty()) {
      throw RuntimeError("emulated ring is unusable after an earlier failure: " + broken);
    }
    info.kind = SpanKind::kAllreduce;
    info.bytes = static_cast<std::int64_t>(count * element_size(dtype));
    check_cuda_status(cudaSetDevice(device_), "cudaSetDevice");
    auto work = std::make_shared<CudaDeviceWork>(info);
    if (ready != nullptr) {
      check_cuda_status(cudaStreamWaitEvent(stream_, ready, 0), "cudaStreamWaitEvent (ready)");
    }
    check_cuda_status(cudaEventRecord(work->start_event(), stream_),
                      "cudaEventRecord (allreduce start)");
    switch (dtype) {
      case DeviceDtype::kFloat32:
        run_ring(static_cast<float*>(data), count, op);
        break;
      case DeviceDtype::kFloat16:
        run_ring(static_cast<__half*>(data), count, op);
        break;
      case DeviceDtype::kBfloat16:
        run_ring(static_cast<__nv_bfloat16*>(data), count, op);
        break;
    }
    check_cuda_status(cudaEventRecord(work->done_event(), stream_),
                      "cudaEventRecord (allreduce done)");
    progress_->watch(work, recorder());
    return work;
  }

  // The kernels of one stream already run in issue order; nothing to group.
  void group_start() override {}
  void group_end() override {}

 private:
  // Inboxes for P-1 peers of one chunk each, grown when a larger all-reduce comes:
  // stream-ordered where the device has memory pools (the old buffers are freed after
  // the kernels that use them, the host does not wait), else after a stream sync.
  void ensure_inbox(std::size_t bytes) {
    if (bytes <= inbox_bytes_) return;
    if (inbox_ != nullptr) {
      if (stream_ordered_alloc_) {
        check_cuda_status(cudaFreeAsync(inbox_, stream_), "cudaFreeAsync (emulated ring inbox)");
      } else {
        check_cuda_status(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (emulated ring)");
        check_cuda_status(cudaFree(inbox_), "cudaFree (emulated ring inbox)");
      }
      inbox_ = nullptr;
      inbox_bytes_ = 0;
    }
    const std::string what = std::string(stream_ordered_alloc_ ? "cudaMallocAsync" : "cudaMalloc") +
                             " of " + std::to_string(bytes) + " bytes (emulated ring inbox)";
    check_cuda_status(stream_ordered_alloc_ ? cudaMallocAsync(&inbox_, bytes, stream_)
                                            : cudaMalloc(&inbox_, bytes),
                      what.c_str());
    inbox_bytes_ = bytes;
  }

  template <typename T>
  void run_ring(T* data, std::size_t count, ReduceOp op) {
    const std::vector<RingLaunch> plan =
        emulated_ring_plan(count, peers_, op == ReduceOp::kAverage);
    if (plan.empty()) return;  // a ring of one (or nothing to reduce): the data is the result
    const std::size_t slot_elems = ring_slot_elems(count, peers_);
    ensure_inbox(slot_elems * sizeof(T) * static_cast<std::size_t>(peers_ - 1));
    auto* slots = static_cast<T*>(inbox_);
    for (const RingLaunch& l : plan) {
      tandem_emulated_ring_reduce_copy<T><<<blocks_, kThreads, 0, stream_>>>(
          data, slots + static_cast<std::size_t>(l.inbox_slot) * slot_elems,
          slots + static_cast<std::size_t>(l.outbox_slot) * slot_elems, l.recv.begin, l.recv.size,
          l.reduce ? 1 : 0, l.recv_scale, l.next.begin, l.next.size, l.next_factor);
      check_cuda_status(cudaGetLastError(), "launch of tandem_emulated_ring_reduce_copy");
    }
  }

  const int device_;
  const int peers_;
  const int blocks_;
  cudaStream_t stream_ = nullptr;
  bool stream_ordered_alloc_ = false;
  void* inbox_ = nullptr;  // (peers - 1) chunk slots; only the issuing thread touches it
  std::size_t inbox_bytes_ = 0;
  std::unique_ptr<DeviceProgress> progress_;
};

}  // namespace

std::unique_ptr<DeviceCommunicator> make_emulated_ring(const DeviceCommOptions& options,
                                                       int device) {
  if (options.emulated_peers < 1 || options.emulated_peers > 1024) {
    throw UsageError("--emulated-peers: must be 1..1024, got " +
                     std::to_string(options.emulated_peers));
  }
  if (options.emulated_blocks < 0 || options.emulated_blocks > 65535) {
    throw UsageError("--emulated-blocks: must be 0 (default) or 1..65535, got " +
                     std::to_string(options.emulated_blocks));
  }
  return std::make_unique<EmulatedRing>(options, device);
}

}  // namespace tandem
