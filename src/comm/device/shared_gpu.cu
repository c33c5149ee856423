// The shared-GPU communicator (shared_gpu.h): several ranks of one process on one GPU.
//
// Note [shared-gpu protocol]: the ranks' issuing threads never wait for one another. A
// rank enqueues its whole part of an operation on its own communication stream at issue,
// and the streams order themselves through counters in device memory: a rank signals a
// counter with a one-thread kernel (the writes before it are complete and visible: it runs
// after them in stream order, fences, and raises the counter with atomicMax, so a counter
// only grows), and waits for its peers' counters with the driver's stream memory
// operation cuStreamWaitValue32 (>=), which holds the stream without an SM.
// A rank's buffers are known to its peers only through a table in device memory: the
// signal kernel of a collective first writes this rank's input and output pointers into
// the operation's row (row n mod kRows, n the collective's number on this communicator).
// A collective n on rank q:
//   1. publish: pointers into row n, then arrived[q] = n; wait arrived[p] >= n for all p;
//   2. its share: all-reduce, chunk q of every input summed into chunk q of its output;
//      reduce-scatter, block q of every input summed into its output; allgather, every
//      input into its block of the output; broadcast, the root's buffer into its own;
//   3. all-reduce only: reduced[q] = n; wait for all; every other chunk p copied from
//      rank p's output, where chunk p is final;
//   4. released[q] = n; wait for all: no peer still reads this rank's buffers when the
//      operation's done event fires (after it the rank's compute may overwrite them).
// A row is rewritten by collective n + kRows, which every rank publishes only after it saw
// all ranks arrive at n + kRows - 1, by when every kernel of collective n has ended.
// A barrier is step 1 alone. Point to point between q and p (q != p) is matched in issue
// order per ordered pair, as NCCL's (tags are not compared): the k-th send from q to p
// writes its pointer and count into the pair's slot k mod kRows and raises posted[q][p]
// to k, then waits for consumed[q][p] >= k (a send completes when its receive did, as
// NCCL's); the k-th receive waits posted[q][p] >= k, copies, and raises consumed[q][p].
// In a group every send posts before any receive of the group is enqueued, and the sends
// wait for their receives at the group's end, so that two neighbours' groups of a send
// and a receive meet. A receive whose send posted a different count copies the smaller
// and flags the mismatch, which fails the rank's next poll (health()).
// Abort (a rank failed, or a timeout): a flag in mapped host memory tells every kernel
// started afterwards to return at once, and every counter is set past any number, so no
// stream waits on a peer that will never come; the operations then complete (failed by
// the skeleton), and nothing hangs at destruction.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/device/device_communicator.h"
#include "comm/device/device_select.h"
#include "comm/device/shared_gpu.h"
#include "core/error.h"
#include "cuda/check.h"

namespace tandem {

namespace {

constexpr int kThreads = 512;
constexpr int kBlocks = 16;  // about NCCL's channel count within a node, as the emulated ring
constexpr int kRows = 4;     // rows of the pointer tables (Note [shared-gpu protocol])

// ---- the driver's stream memory operations, through the runtime's entry points ----

struct MemOps {
  PFN_cuStreamWaitValue32_v11070 wait = nullptr;
};

const MemOps* mem_ops() {
  static const MemOps* const loaded = []() -> const MemOps* {
    static MemOps ops;
    auto entry = [](const char* name, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult found{};
      if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found) !=
              cudaSuccess ||
          found != cudaDriverEntryPointSuccess || p == nullptr) {
        (void)cudaGetLastError();
        return false;
      }
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
      return true;
    };
    return entry("cuStreamWaitValue32", ops.wait) ? &ops : nullptr;
  }();
  return loaded;
}

// ---- kernels (names start with tandem_shared: kernel timing classes them as
// communication by that prefix, timeline/gpu/kernel_timer.h) ----

__device__ float load(const float* p) { return *p; }
__device__ float load(const __half* p) { return __half2float(*p); }
__device__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ void store(float* p, float v) { *p = v; }
__device__ void store(__half* p, float v) { *p = __float2half_rn(v); }
__device__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

__device__ bool aborted(const volatile int* flag) { return *flag != 0; }

// Pointers first (row[0], row[1]; nothing when row is null), then the counter.
__global__ void tandem_shared_signal(void** row, const void* input, void* output,
                                     unsigned int* counter, unsigned int value) {
  if (row != nullptr) {
    row[0] = const_cast<void*>(input);
    row[1] = output;
  }
  __threadfence_system();
  atomicMax(counter, value);
}

// The point-to-point slot: the pointer and the count of the send.
__global__ void tandem_shared_post(void** slot, unsigned long long* count, const void* data,
                                   unsigned long long n, unsigned int* counter,
                                   unsigned int value) {
  *slot = const_cast<void*>(data);
  *count = n;
  __threadfence_system();
  atomicMax(counter, value);
}

// dst[i] = (sum over ranks p of input_p[offset + i]) / divisor, i < count; row holds
// (input, output) per rank.
template <typename T>
__global__ void tandem_shared_reduce(void* const* row, int ranks, std::size_t offset, T* dst,
                                     std::size_t count, float divisor, const volatile int* flag) {
  if (aborted(flag)) return;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    float acc = load(static_cast<const T*>(row[0]) + offset + i);
    for (int p = 1; p < ranks; ++p) acc += load(static_cast<const T*>(row[2 * p]) + offset + i);
    store(dst + i, divisor == 1.0f ? acc : acc / divisor);
  }
}

// dst[i] for i < total, in blocks of `block` elements: block p from rank p's output at
// the same index (from_output) or from its input at i - p * block; block `skip` is left.
template <typename T>
__global__ void tandem_shared_gather(void* const* row, std::size_t block, std::size_t total,
                                     int from_output, int skip, T* dst, const volatile int* flag) {
  if (aborted(flag)) return;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int p = static_cast<int>(i / block);
    if (p == skip) continue;
    dst[i] = from_output ? static_cast<const T*>(row[2 * p + 1])[i]
                         : static_cast<const T*>(row[2 * p])[i - p * block];
  }
}

// dst[i] = (*src)[i] for i < min(count, *posted); a different *posted flags a mismatch.
__global__ void tandem_shared_copy(void* const* src, const unsigned long long* posted, float* dst,
                                   std::size_t count, volatile int* flag, volatile int* mismatch) {
  if (aborted(flag)) return;
  const std::size_t sent = posted == nullptr ? count : static_cast<std::size_t>(*posted);
  const std::size_t n = sent < count ? sent : count;
  if (posted != nullptr && *posted != count && blockIdx.x == 0 && threadIdx.x == 0) *mismatch = 1;
  const float* from = static_cast<const float*>(*src);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    dst[i] = from[i];
  }
}

// ---- the world: what the ranks of one communicator share ----

// Two flags per world in mapped host memory, which the host writes (aborted) and reads (a
// size mismatch) without a CUDA call, and kernels reach through a device pointer. Taken
// from one allocation made once and kept for the process: freeing pinned memory would
// wait for the whole device.
class FlagPool {
 public:
  struct Flags {
    volatile int* host = nullptr;  // [0] aborted, [1] a receive's size differed from its send's
    int* device = nullptr;
    std::size_t index = 0;
  };

  static Flags take() {
    FlagPool& pool = instance();
    const std::lock_guard lock(pool.mutex_);
    if (pool.host_ == nullptr) {
      void* host = nullptr;
      void* device = nullptr;
      TANDEM_CUDA_CHECK(cudaHostAlloc(&host, kSlots * 2 * sizeof(int),
                                      cudaHostAllocMapped | cudaHostAllocPortable));
      TANDEM_CUDA_CHECK(cudaHostGetDevicePointer(&device, host, 0));
      pool.host_ = static_cast<int*>(host);
      pool.device_ = static_cast<int*>(device);
      for (std::size_t i = kSlots; i > 0; --i) pool.free_.push_back(i - 1);
    }
    if (pool.free_.empty()) {
      throw RuntimeError("shared: more than " + std::to_string(kSlots) +
                         " communicators at once in this process");
    }
    const std::size_t i = pool.free_.back();
    pool.free_.pop_back();
    Flags f{.host = pool.host_ + 2 * i, .device = pool.device_ + 2 * i, .index = i};
    f.host[0] = 0;
    f.host[1] = 0;
    return f;
  }

  static void give_back(const Flags& f) {
    FlagPool& pool = instance();
    const std::lock_guard lock(pool.mutex_);
    pool.free_.push_back(f.index);
  }

 private:
  static constexpr std::size_t kSlots = 4096;
  static FlagPool& instance() {
    static FlagPool pool;
    return pool;
  }
  std::mutex mutex_;
  int* host_ = nullptr;
  int* device_ = nullptr;
  std::vector<std::size_t> free_;
};

class SharedWorld {
 public:
  SharedWorld(int device, int ranks, std::chrono::nanoseconds timeout)
      : device_(device), ranks_(ranks), timeout_(timeout), flags_(FlagPool::take()) {
    const CurrentDeviceRestorer restore;
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    int pools = 0;
    stream_ordered_ =
        cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) == cudaSuccess &&
        pools != 0;
    (void)cudaGetLastError();
    // One allocation: the counters, then the tables (8-byte entries).
    const auto n = static_cast<std::size_t>(ranks);
    counter_count_ = 3 * n + 2 * n * n;
    const std::size_t counter_bytes = (counter_count_ * sizeof(unsigned int) + 7) / 8 * 8;
    const std::size_t entries = kRows * n * 2 + 2 * n * n * kRows;
    const std::size_t bytes = counter_bytes + entries * 8;
    void* memory = nullptr;
    TANDEM_CUDA_CHECK(stream_ordered_ ? cudaMallocAsync(&memory, bytes, stream_)
                                      : cudaMalloc(&memory, bytes));
    memory_ = memory;
    counters_ = static_cast<unsigned int*>(memory);
    rows_ = reinterpret_cast<void**>(static_cast<char*>(memory) + counter_bytes);
    slots_ = rows_ + kRows * n * 2;
    slot_counts_ = reinterpret_cast<unsigned long long*>(slots_ + n * n * kRows);
    TANDEM_CUDA_CHECK(cudaMemsetAsync(memory, 0, bytes, stream_));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // Every communicator of the world synchronized its stream before letting go of it. The
  // memory goes back in stream order where the device has pools: a cudaFree would wait
  // for the whole device, other worlds' streams included, which may wait for this thread.
  ~SharedWorld() {
    cudaSetDevice(device_);
    if (stream_ordered_) {
      cudaFreeAsync(memory_, stream_);
      cudaStreamSynchronize(stream_);
    } else {
      cudaStreamSynchronize(stream_);
      cudaFree(memory_);
    }
    cudaStreamDestroy(stream_);
    FlagPool::give_back(flags_);
  }

  SharedWorld(const SharedWorld&) = delete;
  SharedWorld& operator=(const SharedWorld&) = delete;

  int device() const { return device_; }
  int ranks() const { return ranks_; }

  unsigned int* arrived(int r) { return counters_ + r; }
  unsigned int* reduced(int r) { return counters_ + ranks_ + r; }
  unsigned int* released(int r) { return counters_ + 2 * ranks_ + r; }
  unsigned int* posted(int from, int to) { return counters_ + 3 * ranks_ + from * ranks_ + to; }
  unsigned int* consumed(int from, int to) {
    return counters_ + 3 * ranks_ + ranks_ * ranks_ + from * ranks_ + to;
  }
  void** row(std::uint64_t n) { return rows_ + (n % kRows) * static_cast<std::size_t>(ranks_) * 2; }
  void** slot(int from, int to, std::uint64_t k) {
    return slots_ + (static_cast<std::size_t>(from * ranks_ + to) * kRows + k % kRows);
  }
  unsigned long long* slot_count(int from, int to, std::uint64_t k) {
    return slot_counts_ + (static_cast<std::size_t>(from * ranks_ + to) * kRows + k % kRows);
  }
  const volatile int* abort_flag() const { return flags_.device; }
  volatile int* device_mismatch() const { return flags_.device + 1; }
  bool mismatch() const { return flags_.host[1] != 0; }

  // Once: kernels started from now on return at once, and no counter holds a stream.
  void release() {
    if (released_.exchange(true)) return;
    flags_.host[0] = 1;
    std::atomic_thread_fence(std::memory_order_seq_cst);
    const CurrentDeviceRestorer restore;
    if (cudaSetDevice(device_) != cudaSuccess ||
        cudaMemsetAsync(counters_, 0x7f, counter_count_ * sizeof(unsigned int), stream_) !=
            cudaSuccess) {
      (void)cudaGetLastError();  // a broken context fails every operation anyway
    }
    { const std::lock_guard lock(split_mutex_); }
    split_done_.notify_all();
  }

  // The ranks' half of split (a collective: every rank calls it with the same `number`):
  // this rank's child world and its rank there, made once every rank of this world gave
  // its color and key. Blocks the caller until then (NCCL's split blocks too).
  std::pair<std::shared_ptr<SharedWorld>, int> split(std::uint64_t number, int rank, int color,
                                                     int key) {
    std::unique_lock lock(split_mutex_);
    Split& s = splits_[number];
    if (s.entries.empty()) s.entries.resize(static_cast<std::size_t>(ranks_));
    s.entries[static_cast<std::size_t>(rank)] = {color, key};
    if (++s.arrived == ranks_) {
      std::map<int, std::vector<int>> members;  // color -> parent ranks by (key, rank)
      for (int r = 0; r < ranks_; ++r)
        members[s.entries[static_cast<std::size_t>(r)].color].push_back(r);
      s.children.resize(static_cast<std::size_t>(ranks_));
      for (auto& [c, list] : members) {
        std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
          return s.entries[static_cast<std::size_t>(a)].key <
                 s.entries[static_cast<std::size_t>(b)].key;
        });
        auto child =
            std::make_shared<SharedWorld>(device_, static_cast<int>(list.size()), timeout_);
        for (std::size_t i = 0; i < list.size(); ++i) {
          s.children[static_cast<std::size_t>(list[i])] = {child, static_cast<int>(i)};
        }
      }
      split_done_.notify_all();
    } else {
      const bool done = split_done_.wait_for(
          lock, timeout_, [&] { return s.arrived == ranks_ || released_.load(); });
      if (released_.load()) throw RuntimeError("shared: the communicator was aborted during split");
      if (!done) {
        throw TimeoutError(
            "shared: rank " + std::to_string(rank) + " waited " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()) +
            " s in split for the other ranks");
      }
    }
    auto out = s.children[static_cast<std::size_t>(rank)];
    if (++s.taken == ranks_) splits_.erase(number);
    return out;
  }

 private:
  struct Entry {
    int color = 0;
    int key = 0;
  };
  struct Split {
    std::vector<Entry> entries;
    int arrived = 0;
    int taken = 0;
    std::vector<std::pair<std::shared_ptr<SharedWorld>, int>> children;
  };

  const int device_;
  const int ranks_;
  const std::chrono::nanoseconds timeout_;
  const FlagPool::Flags flags_;
  cudaStream_t stream_ = nullptr;  // allocation, and the release of the counters
  bool stream_ordered_ = false;    // the device has memory pools
  void* memory_ = nullptr;         // what follows, in one allocation
  std::size_t counter_count_ = 0;
  unsigned int* counters_ =
      nullptr;              // arrived, reduced, released [ranks]; posted, consumed [ranks^2]
  void** rows_ = nullptr;   // [kRows][ranks][input, output]
  void** slots_ = nullptr;  // [from][to][kRows] a send's pointer
  unsigned long long* slot_counts_ = nullptr;  // and its count
  std::atomic<bool> released_{false};
  std::mutex split_mutex_;
  std::condition_variable split_done_;
  std::map<std::uint64_t, Split> splits_;
};

// ---- one rank ----

class SharedGpuComm final : public DeviceCommunicator {
 public:
  SharedGpuComm(std::shared_ptr<SharedWorld> world, int rank, std::chrono::nanoseconds timeout)
      : DeviceCommunicator({.rank = rank, .size = world->ranks(), .timeout = timeout},
                           world->device()),
        world_(std::move(world)),
        sends_(static_cast<std::size_t>(world_->ranks()), 0),
        receives_(static_cast<std::size_t>(world_->ranks()), 0) {
    start_thread();
  }

  ~SharedGpuComm() override {
    stop_thread();  // waits for what is in flight
    cudaSetDevice(device());
    cudaStreamSynchronize(stream());
  }

  std::string_view backend_name() const override { return "shared"; }
  std::string describe() const override {
    return "shared-GPU collectives: " + std::to_string(size()) + " ranks on 1 GPU (device " +
           std::to_string(device()) + "), copy and reduce kernels of " + std::to_string(kBlocks) +
           " blocks x " + std::to_string(kThreads) +
           " threads on each rank's stream, ordered by stream memory operations; no interconnect";
  }

 protected:
  std::unique_ptr<ProgressCommunicator> make_split(int color, int key) override {
    auto [child, rank] = world_->split(splits_++, this->rank(), color, key);
    const CurrentDeviceRestorer restore;
    return std::make_unique<SharedGpuComm>(std::move(child), rank, timeout());
  }

  // Note [shared-gpu protocol]: sends post first, receives and collectives in issue
  // order, and the sends wait for their receives last.
  void enqueue(std::span<Op* const> ops) override {
    std::vector<std::pair<int, std::uint64_t>> sent;  // (peer, number) awaiting its receive
    for (Op* op : ops) {
      if (op->kind == SpanKind::kSend && op->peer != rank()) sent.push_back(post(*op));
    }
    for (Op* op : ops) {
      if (op->kind == SpanKind::kSend && op->peer != rank()) continue;
      enqueue_one(*op);
    }
    for (const auto& [peer, k] : sent) wait_geq(world_->consumed(rank(), peer), k);
  }

  std::string health() override {
    if (world_->mismatch()) {
      return "shared: a receive's size differs from its send's (point to point is matched in "
             "issue order per pair of ranks, as NCCL's)";
    }
    return {};
  }
  void on_timeout() override { world_->release(); }
  void on_abort(const std::string& reason) override {
    (void)reason;
    world_->release();
  }

 private:
  void wait_geq(unsigned int* counter, std::uint64_t value) {
    const CUresult status = mem_ops()->wait(
        reinterpret_cast<CUstream>(stream()), reinterpret_cast<CUdeviceptr>(counter),
        static_cast<cuuint32_t>(value), CU_STREAM_WAIT_VALUE_GEQ);
    if (status != CUDA_SUCCESS) {
      throw RuntimeError("cuStreamWaitValue32 failed (CUresult " + std::to_string(status) + ")");
    }
  }
  void wait_all(unsigned int* (SharedWorld::*counter)(int), std::uint64_t value) {
    for (int p = 0; p < size(); ++p) {
      if (p != rank()) wait_geq((world_.get()->*counter)(p), value);
    }
  }
  void signal(void** row, const void* input, void* output, unsigned int* counter,
              std::uint64_t value) {
    tandem_shared_signal<<<1, 1, 0, stream()>>>(row, input, output, counter,
                                                static_cast<unsigned int>(value));
    TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_signal");
  }

  std::pair<int, std::uint64_t> post(Op& op) {
    const int peer = op.peer;
    const std::uint64_t k = ++sends_[static_cast<std::size_t>(peer)];
    // The slot's last user, send k - kRows, must have been received (more than kRows
    // sends to one peer in a group).
    if (k > kRows) wait_geq(world_->consumed(rank(), peer), k - kRows);
    tandem_shared_post<<<1, 1, 0, stream()>>>(
        world_->slot(rank(), peer, k), world_->slot_count(rank(), peer, k), op.input,
        op.input_count, world_->posted(rank(), peer), static_cast<unsigned int>(k));
    TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_post");
    return {peer, k};
  }

  void receive(Op& op) {
    const int peer = op.peer;
    const std::uint64_t k = ++receives_[static_cast<std::size_t>(peer)];
    wait_geq(world_->posted(peer, rank()), k);
    tandem_shared_copy<<<kBlocks, kThreads, 0, stream()>>>(
        world_->slot(peer, rank(), k), world_->slot_count(peer, rank(), k), op.out<float>(),
        op.output_count, const_cast<volatile int*>(world_->abort_flag()),
        world_->device_mismatch());
    TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_copy");
    signal(nullptr, nullptr, nullptr, world_->consumed(peer, rank()), k);
  }

  void enqueue_one(Op& op) {
    if (enqueue_self_p2p(op)) return;
    if (op.kind == SpanKind::kRecv) {
      receive(op);
      return;
    }
    // A collective (Note [shared-gpu protocol]).
    const std::uint64_t n = ++collectives_;
    void** row = world_->row(n);
    signal(row + 2 * rank(), op.input, op.output, world_->arrived(rank()), n);
    wait_all(&SharedWorld::arrived, n);
    if (size() == 1 || op.kind == SpanKind::kBarrier) {
      if (size() == 1 && op.input != op.output) {
        copy_on_stream(op.output, op.input, op.output_count * op.element_bytes());
      }
      return;
    }
    switch (op.type) {
      case DataType::kFloat32:
        collective<float>(op, row, n);
        break;
      case DataType::kFloat16:
        collective<__half>(op, row, n);
        break;
      case DataType::kBFloat16:
        collective<__nv_bfloat16>(op, row, n);
        break;
    }
    signal(nullptr, nullptr, nullptr, world_->released(rank()), n);
    wait_all(&SharedWorld::released, n);
  }

  template <typename T>
  void collective(Op& op, void** row, std::uint64_t n) {
    const auto ranks = static_cast<std::size_t>(size());
    const auto q = static_cast<std::size_t>(rank());
    const float divisor = op.reduce == ReduceOp::kAverage ? static_cast<float>(size()) : 1.0f;
    const volatile int* flag = world_->abort_flag();
    T* out = op.out<T>();
    switch (op.kind) {
      case SpanKind::kAllreduce: {
        const std::size_t count = op.output_count;
        const std::size_t chunk = (count + ranks - 1) / ranks;
        const std::size_t begin = std::min(count, q * chunk);
        const std::size_t len = std::min(count, begin + chunk) - begin;
        if (len > 0) {
          tandem_shared_reduce<T><<<kBlocks, kThreads, 0, stream()>>>(
              row, size(), begin, out + begin, len, divisor, flag);
          TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_reduce");
        }
        signal(nullptr, nullptr, nullptr, world_->reduced(rank()), n);
        wait_all(&SharedWorld::reduced, n);
        if (chunk > 0) {
          tandem_shared_gather<T>
              <<<kBlocks, kThreads, 0, stream()>>>(row, chunk, count, 1, rank(), out, flag);
          TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_gather");
        }
        return;
      }
      case SpanKind::kReduceScatter:
        tandem_shared_reduce<T><<<kBlocks, kThreads, 0, stream()>>>(
            row, size(), q * op.output_count, out, op.output_count, divisor, flag);
        TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_reduce");
        return;
      case SpanKind::kAllgather:
        if (op.input_count > 0) {
          tandem_shared_gather<T><<<kBlocks, kThreads, 0, stream()>>>(
              row, op.input_count, op.output_count, 0, -1, out, flag);
          TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_gather");
        }
        return;
      case SpanKind::kBroadcast:
        if (op.peer != rank() && op.output_count > 0) {
          tandem_shared_copy<<<kBlocks, kThreads, 0, stream()>>>(
              row + 2 * op.peer + 1, nullptr, static_cast<float*>(op.output), op.output_count,
              const_cast<volatile int*>(flag), world_->device_mismatch());
          TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_copy");
        }
        return;
      default:
        throw RuntimeError("shared: unsupported operation");
    }
  }

  const std::shared_ptr<SharedWorld> world_;
  // Issuing thread only.
  std::uint64_t collectives_ = 0;
  std::uint64_t splits_ = 0;
  std::vector<std::uint64_t> sends_;     // per peer: sends issued
  std::vector<std::uint64_t> receives_;  // per peer: receives issued
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_shared_gpu_world(const BackendOptions& options,
                                                                 int device) {
  if (options.ranks < 1 || options.ranks > 64) {
    throw UsageError("--ranks with --device-comm shared: must be 1..64 ranks on one GPU, got " +
                     std::to_string(options.ranks));
  }
  if (mem_ops() == nullptr) {
    throw RuntimeError(
        "--device-comm shared: the driver's stream memory operations (cuStreamWaitValue32) are "
        "not available");
  }
  const auto world = std::make_shared<SharedWorld>(device, options.ranks, options.timeout);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < options.ranks; ++r) {
    out.push_back(std::make_unique<SharedGpuComm>(world, r, options.timeout));
  }
  return out;
}

}  // namespace tandem
