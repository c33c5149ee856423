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

#include "comm/device/device_communicator.h"
#include "comm/device/device_elements.h"
#include "comm/device/device_select.h"
#include "comm/device/emulated_ring.h"
#include "comm/device/emulated_ring_plan.h"
#include "core/error.h"
#include "cuda/check.h"

namespace tandem {

namespace {

constexpr int kThreads = 512;

using device_elements::load;
using device_elements::store;

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
      const float in = load(inbox + i);
      store(own + recv_offset + i, reduce ? (load(own + recv_offset + i) + in) * recv_scale : in);
    }
    if (i < next_count) store(outbox + i, load(own + next_offset + i) * next_factor);
  }
}

class EmulatedRing final : public DeviceCommunicator {
 public:
  EmulatedRing(const BackendOptions& options, int device)
      : DeviceCommunicator({.rank = 0, .size = 1, .timeout = options.timeout}, device),
        peers_(options.device.emulated_peers),
        blocks_(options.device.emulated_blocks > 0 ? options.device.emulated_blocks : kEmulatedDefaultBlocks) {
    start_thread();
  }

  ~EmulatedRing() override {
    stop_thread();  // waits for what is in flight
    cudaSetDevice(device());
    cudaStreamSynchronize(stream());
    if (inbox_ != nullptr) cudaFree(inbox_);
  }

  std::string_view backend_name() const override { return "emulated"; }
  bool emulated() const override { return true; }
  int allreduce_sum_ranks() const override { return peers_; }
  std::string describe() const override {
    return "emulated ring all-reduce: rank 0's side of a ring of " + std::to_string(peers_) +
           " peers on 1 GPU (device " + std::to_string(device()) + "), " +
           std::to_string(blocks_) + " blocks x " + std::to_string(kThreads) +
           " threads per reduce-copy kernel, " + std::to_string(2 * (peers_ - 1)) +
           " steps; reduce-scatter, allgather, broadcast and point to point are device copies "
           "of a world of one; no real interconnect (emulated)";
  }

 protected:
  // A world of one splits into a world of one whatever the color: a new emulated ring
  // on the same device with the same options (its own stream and inbox), so that the
  // child's all-reduce costs what this one's does.
  std::unique_ptr<ProgressCommunicator> make_split(int color, int key) override {
    (void)color;
    (void)key;
    const CurrentDeviceRestorer restore;
    return std::make_unique<EmulatedRing>(
        BackendOptions{.timeout = timeout(),
                       .device = {.emulated_peers = peers_, .emulated_blocks = blocks_}},
        device());
  }

  // The kernels of one stream already run in issue order: a group is its operations.
  void enqueue(std::span<Op* const> ops) override {
    for (Op* op : ops) enqueue_one(*op);
  }

 private:
  // A world of one: what each operation leaves in the output (comm/communicator.h), the
  // all-reduce with the cost of a ring of peers_ (Note [emulated ring]).
  void enqueue_one(Op& op) {
    switch (op.kind) {
      case SpanKind::kAllreduce:
        switch (op.type) {
          case DataType::kFloat32:
            run_ring(op.out<float>(), op.output_count, op.reduce);
            return;
          case DataType::kFloat16:
            run_ring(op.out<__half>(), op.output_count, op.reduce);
            return;
          case DataType::kBFloat16:
            run_ring(op.out<__nv_bfloat16>(), op.output_count, op.reduce);
            return;
        }
        return;
      case SpanKind::kReduceScatter:
      case SpanKind::kAllgather:
        copy_on_stream(op.output, op.input, op.output_count * op.element_bytes());
        return;
      case SpanKind::kBroadcast:
      case SpanKind::kBarrier:
        return;
      case SpanKind::kSend:
      case SpanKind::kRecv:
        enqueue_self_p2p(op);
        return;
      default:
        throw RuntimeError("unsupported operation");
    }
  }

  // Inboxes for P-1 peers of one chunk each, grown when a larger all-reduce comes:
  // stream-ordered where the device has memory pools (the old buffers are freed after
  // the kernels that use them, the host does not wait), else after a stream sync.
  void ensure_inbox(std::size_t bytes) {
    if (bytes <= inbox_bytes_) return;
    if (inbox_ != nullptr) {
      if (stream_ordered_alloc()) {
        check_cuda_status(cudaFreeAsync(inbox_, stream()), "cudaFreeAsync (emulated ring inbox)");
      } else {
        check_cuda_status(cudaStreamSynchronize(stream()), "cudaStreamSynchronize (emulated ring)");
        check_cuda_status(cudaFree(inbox_), "cudaFree (emulated ring inbox)");
      }
      inbox_ = nullptr;
      inbox_bytes_ = 0;
    }
    const std::string what = std::string(stream_ordered_alloc() ? "cudaMallocAsync" : "cudaMalloc") +
                             " of " + std::to_string(bytes) + " bytes (emulated ring inbox)";
    check_cuda_status(stream_ordered_alloc() ? cudaMallocAsync(&inbox_, bytes, stream())
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
      tandem_emulated_ring_reduce_copy<<<blocks_, kThreads, 0, stream()>>>(
          data, slots + static_cast<std::size_t>(l.inbox_slot) * slot_elems,
          slots + static_cast<std::size_t>(l.outbox_slot) * slot_elems, l.recv.begin, l.recv.size,
          l.reduce ? 1 : 0, l.recv_scale, l.next.begin, l.next.size, l.next_factor);
      check_cuda_status(cudaGetLastError(), "launch of tandem_emulated_ring_reduce_copy");
    }
  }

  const int peers_;
  const int blocks_;
  // Issuing thread only.
  void* inbox_ = nullptr;  // (peers - 1) chunk slots
  std::size_t inbox_bytes_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> make_emulated_ring(const BackendOptions& options, int device) {
  if (options.device.emulated_peers < 1 || options.device.emulated_peers > 1024) {
    throw UsageError("--emulated-peers: must be 1..1024, got " +
                     std::to_string(options.device.emulated_peers));
  }
  if (options.device.emulated_blocks < 0 || options.device.emulated_blocks > 65535) {
    throw UsageError("--emulated-blocks: must be 0 (default) or 1..65535, got " +
                     std::to_string(options.device.emulated_blocks));
  }
  return std::make_unique<EmulatedRing>(options, device);
}

}  // namespace tandem
