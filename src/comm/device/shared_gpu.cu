// The shared-GPU communicator (shared_gpu.h): several ranks of one process on one GPU.
//
// Note [shared-gpu protocol]: the ranks' buffers are all on one device, so a collective is
// kernels that read the other ranks' buffers directly, on each rank's own communication
// stream, ordered across the streams by CUDA events. The rule that makes it safe: a stream
// never waits for work that is not enqueued yet. So an operation's work is enqueued, for
// every rank taking part, by one thread once every one of them has issued it: the ranks
// meet on the host (a rendezvous per operation, under the world's mutex), the last to
// arrive enqueues all of it, and the others wait until it has (their done events are
// recorded after it, in DeviceCommunicator::start_group). Every event a stream waits for
// was recorded before the wait was enqueued, and all of this is enqueued under one mutex:
// every dependency points back in one total order, and there is no cycle. An implicit
// device synchronization (cudaFree, say) by any rank's thread then waits only for work
// that can finish, where streams waiting for a peer's future signal would wait forever.
// The host blocks at issue until the peers issue the same operation: a collective until
// every rank of the communicator did, a send or a receive until its peer issued the match
// (point to point is matched in issue order per ordered pair of ranks, as NCCL's; tags are
// not compared). That is the wait NCCL's kernels make on a stream, made on the host: a
// program whose operations NCCL can match matches here too.
// A collective over P ranks (rank p's stream S_p; the pointers of every rank are known on
// the host, and are the kernels' arguments):
//   1. every S_p records a0[p]; every S_p waits a0[q] for q != p (every input is ready);
//   2. all-reduce: S_p sums chunk p of every input into chunk p of its output, records
//      a1[p]; every S_p waits a1[q] and copies every other chunk q from rank q's output;
//      reduce-scatter: S_p sums block p of every input into its output; allgather: S_p
//      copies every input into its block of the output; broadcast: S_p copies the root's
//      buffer into its own; barrier: nothing;
//   3. every S_p records a2[p] and waits a2[q]: no peer still reads rank p's buffers when
//      its done event fires (after it the rank's compute may overwrite them).
// A matched send (stream S of the sender) and receive (stream R): S records, R waits,
// copies, records, and S waits: a send completes when its receive did, as NCCL's.
// The events are a few per rank, recorded again for every operation: a wait takes the
// event's state when it is enqueued, and everything is enqueued under the mutex.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/device/device_communicator.h"
#include "comm/device/device_elements.h"
#include "comm/device/device_select.h"
#include "comm/device/shared_gpu.h"
#include "core/error.h"
#include "cuda/check.h"

namespace tandem {

namespace {

constexpr int kThreads = 512;
constexpr int kBlocks = 16;  // about NCCL's channel count within a node, as the emulated ring
constexpr int kMaxRanks = 64;

// Every rank's buffer of one operation, as a kernel argument.
struct RankPointers {
  const void* p[kMaxRanks];
};

// ---- kernels (names start with tandem_shared: kernel timing classes them as
// communication by that prefix, timeline/gpu/kernel_timer.h) ----

using device_elements::load;
using device_elements::store;

// dst[i] = (in_0[offset + i] + in_1[offset + i] + ...) / divisor for i < count, summed in
// rank order as the host backends do.
template <typename T>
__global__ void tandem_shared_reduce(RankPointers in, int ranks, std::size_t offset, T* dst,
                                     std::size_t count, float divisor) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    float acc = load(static_cast<const T*>(in.p[0]) + offset + i);
    for (int q = 1; q < ranks; ++q) acc += load(static_cast<const T*>(in.p[q]) + offset + i);
    store(dst + i, divisor == 1.0f ? acc : acc / divisor);
  }
}

// dst[i] for i < total, in blocks of `block` elements: block q from src_q at i - q * block
// (src_offset 0) or at i (src_offset 1: the sources are whole buffers); block `skip` is
// left as it is (-1: none).
template <typename T>
__global__ void tandem_shared_gather(RankPointers src, std::size_t block, std::size_t total,
                                     int whole, int skip, T* dst) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += stride) {
    const int q = static_cast<int>(i / block);
    if (q == skip) continue;
    dst[i] = static_cast<const T*>(src.p[q])[whole ? i : i - static_cast<std::size_t>(q) * block];
  }
}

__global__ void tandem_shared_copy(const float* src, float* dst, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    dst[i] = src[i];
  }
}

// One rank's side of an operation, as the thread that enqueues it needs it.
struct Part {
  Op* op = nullptr;
  cudaStream_t stream = nullptr;
};

// ---- the world: what the ranks of one communicator share ----

class SharedWorld {
 public:
  SharedWorld(int device, int ranks, std::chrono::nanoseconds timeout)
      : device_(device), ranks_(ranks), timeout_(timeout) {
    const CurrentDeviceRestorer restore;
    TANDEM_CUDA_CHECK(cudaSetDevice(device));
    events_.resize(static_cast<std::size_t>(ranks) * kEventsPerRank);
    for (cudaEvent_t& e : events_) {
      TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
  }

  ~SharedWorld() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  SharedWorld(const SharedWorld&) = delete;
  SharedWorld& operator=(const SharedWorld&) = delete;

  int device() const { return device_; }
  int ranks() const { return ranks_; }

  // Rank `rank` issues `ops` (one group) on `stream`: each is registered, whatever became
  // complete is enqueued by this thread, and the call returns once every one of `ops` is
  // enqueued (by this thread or a peer's). Throws TimeoutError (naming the first op) when
  // a peer does not come within the timeout, AbortedError once the world was released.
  // `collectives`, `sends` and `receives` (per peer) count what this rank issued so far.
  void issue(int rank, cudaStream_t stream, std::span<Op* const> ops, std::uint64_t& collectives,
             std::vector<std::uint64_t>& sends, std::vector<std::uint64_t>& receives) {
    std::unique_lock lock(mutex_);
    if (!released_.empty()) throw AbortedError(released_);
    std::vector<Pending*> mine;
    for (Op* op : ops) {
      Pending* p = nullptr;
      if (op->kind == SpanKind::kSend || op->kind == SpanKind::kRecv) {
        const bool send = op->kind == SpanKind::kSend;
        const int from = send ? rank : op->peer;
        const int to = send ? op->peer : rank;
        auto& counter = (send ? sends : receives)[static_cast<std::size_t>(op->peer)];
        p = &pairs_[{from, to, ++counter}];
        p->parts.resize(2);
        p->parts[send ? 0 : 1] = {op, stream};
      } else {
        p = &collectives_[++collectives];
        p->parts.resize(static_cast<std::size_t>(ranks_));
        p->parts[static_cast<std::size_t>(rank)] = {op, stream};
      }
      ++p->arrived;
      mine.push_back(p);
    }
    enqueue_ready();
    const auto done = [&] {
      return !released_.empty() ||
             std::all_of(mine.begin(), mine.end(), [](const Pending* p) { return p->enqueued; });
    };
    const auto start = std::chrono::steady_clock::now();
    if (!done()) {
      enqueued_.notify_all();
      if (!enqueued_.wait_for(lock, timeout_, done)) {
        const auto waited = std::chrono::steady_clock::now() - start;
        release_locked(
            "a rank waited " +
            std::to_string(std::chrono::duration_cast<std::chrono::seconds>(waited).count()) +
            " s for its peers to issue an operation");
        std::rethrow_exception(ops[0]->work->timeout_error(
            std::chrono::duration_cast<std::chrono::nanoseconds>(waited).count()));
      }
    }
    enqueued_.notify_all();
    for (Pending* p : mine) {
      if (!p->error.empty()) throw RuntimeError(p->error);
    }
    if (!std::all_of(mine.begin(), mine.end(), [](const Pending* p) { return p->enqueued; })) {
      throw AbortedError(released_);
    }
    // The last of the parties to leave forgets the operation.
    for (Pending* p : mine) {
      if (++p->left == p->arrived && p->arrived == static_cast<int>(p->parts.size())) {
        forget(p);
      }
    }
  }

  // Abort: every rank waiting in issue() or split() fails, and nothing is enqueued any
  // more. Nothing on the device waits for a peer (Note [shared-gpu protocol]), so nothing
  // else needs undoing.
  void release(const std::string& reason) {
    const std::lock_guard lock(mutex_);
    release_locked(reason);
  }

  // The ranks' half of split (a collective: every rank calls it with the same `number`):
  // this rank's child world and its rank there, made once every rank of this world gave
  // its color and key. Blocks the caller until then (NCCL's split blocks too).
  std::pair<std::shared_ptr<SharedWorld>, int> split(std::uint64_t number, int rank, int color,
                                                     int key) {
    std::unique_lock lock(mutex_);
    if (!released_.empty()) throw AbortedError(released_);
    Split& s = splits_[number];
    if (s.entries.empty()) s.entries.resize(static_cast<std::size_t>(ranks_));
    s.entries[static_cast<std::size_t>(rank)] = {color, key};
    if (++s.arrived == ranks_) {
      std::map<int, std::vector<int>> members;  // color -> parent ranks, by (key, rank)
      for (int r = 0; r < ranks_; ++r) {
        members[s.entries[static_cast<std::size_t>(r)].color].push_back(r);
      }
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
      enqueued_.notify_all();
    } else if (!enqueued_.wait_for(lock, timeout_,
                                   [&] { return s.arrived == ranks_ || !released_.empty(); })) {
      release_locked("a rank waited in split for its peers");
      throw TimeoutError(
          "rank " + std::to_string(rank) + ": split not complete after " +
          std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()) +
          " s (the other ranks did not split)");
    }
    if (s.arrived != ranks_) throw AbortedError(released_);
    auto out = s.children[static_cast<std::size_t>(rank)];
    if (++s.taken == ranks_) splits_.erase(number);
    return out;
  }

 private:
  static constexpr int kEventsPerRank = 3;

  struct Pending {
    std::vector<Part> parts;  // per rank (collectives), or {send, receive}
    int arrived = 0;
    int left = 0;
    bool enqueued = false;
    std::string error;  // set instead of enqueuing: what the parties' ops disagree on
  };
  using PairKey = std::tuple<int, int, std::uint64_t>;  // from, to, number on that pair
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

  cudaEvent_t event(int rank, int which) const {
    return events_[static_cast<std::size_t>(rank * kEventsPerRank + which)];
  }

  void release_locked(const std::string& reason) {
    if (released_.empty()) released_ = "aborted: " + reason;
    enqueued_.notify_all();
  }

  void forget(Pending* p) {
    for (auto it = collectives_.begin(); it != collectives_.end(); ++it) {
      if (&it->second == p) {
        collectives_.erase(it);
        return;
      }
    }
    for (auto it = pairs_.begin(); it != pairs_.end(); ++it) {
      if (&it->second == p) {
        pairs_.erase(it);
        return;
      }
    }
  }

  // Enqueues every operation whose parties have all arrived: collectives in their order
  // (they are issued in one order by every rank), then matched pairs. Under the mutex.
  void enqueue_ready() {
    const CurrentDeviceRestorer restore;
    TANDEM_CUDA_CHECK(cudaSetDevice(device_));
    for (auto& [n, p] : collectives_) {
      if (p.enqueued || p.arrived < ranks_) continue;
      p.error = collective_mismatch(p);
      if (p.error.empty()) enqueue_collective(p);
      p.enqueued = true;
    }
    for (auto& [key, p] : pairs_) {
      if (p.enqueued || p.arrived < 2) continue;
      enqueue_pair(std::get<0>(key), std::get<1>(key), p);
      p.enqueued = true;
    }
  }

  void enqueue_pair(int from, int to, Pending& p) {
    const Op& send = *p.parts[0].op;
    Op& recv = *p.parts[1].op;
    if (send.input_count != recv.output_count) {
      p.error = "size mismatch: rank " + std::to_string(from) + " sends " +
                std::to_string(send.input_count) + " elements to rank " + std::to_string(to) +
                ", which receives " + std::to_string(recv.output_count) +
                " (point to point is matched in issue order per pair of ranks, as NCCL's)";
      return;
    }
    const cudaStream_t s = p.parts[0].stream, r = p.parts[1].stream;
    TANDEM_CUDA_CHECK(cudaEventRecord(event(from, 0), s));
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(r, event(from, 0), 0));
    if (recv.output_count > 0) {
      tandem_shared_copy<<<kBlocks, kThreads, 0, r>>>(static_cast<const float*>(send.input),
                                                      recv.out<float>(), recv.output_count);
      TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_copy");
    }
    TANDEM_CUDA_CHECK(cudaEventRecord(event(to, 1), r));
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(s, event(to, 1), 0));
  }

  // Every stream waits for every other stream's event `which`, recorded now.
  void meet(const Pending& p, int which) {
    for (int q = 0; q < ranks_; ++q) {
      TANDEM_CUDA_CHECK(
          cudaEventRecord(event(q, which), p.parts[static_cast<std::size_t>(q)].stream));
    }
    for (int q = 0; q < ranks_; ++q) {
      for (int o = 0; o < ranks_; ++o) {
        if (o != q) {
          TANDEM_CUDA_CHECK(
              cudaStreamWaitEvent(p.parts[static_cast<std::size_t>(q)].stream, event(o, which), 0));
        }
      }
    }
  }

  // "" when every rank issued the same collective, else what differs.
  static std::string collective_mismatch(const Pending& p) {
    const Op& first = *p.parts[0].op;
    for (std::size_t q = 1; q < p.parts.size(); ++q) {
      const Op& op = *p.parts[q].op;
      if (op.kind != first.kind || op.type != first.type || op.output_count != first.output_count ||
          op.input_count != first.input_count || op.peer != first.peer ||
          op.reduce != first.reduce) {
        return "collective mismatch: rank " + std::to_string(q) + " issued " +
               op.work->info().describe() + " where rank 0 issued " +
               first.work->info().describe() +
               " (every rank issues the same collectives in the "
               "same order)";
      }
    }
    return {};
  }

  void enqueue_collective(Pending& p) {
    meet(p, 0);
    const Op& first = *p.parts[0].op;
    if (first.kind != SpanKind::kBarrier) {
      switch (first.type) {
        case DataType::kFloat32:
          collective<float>(p);
          break;
        case DataType::kFloat16:
          collective<__half>(p);
          break;
        case DataType::kBFloat16:
          collective<__nv_bfloat16>(p);
          break;
      }
      meet(p, 2);
    }
  }

  template <typename T>
  void collective(Pending& p) {
    const auto n = static_cast<std::size_t>(ranks_);
    RankPointers inputs{}, outputs{};
    for (std::size_t q = 0; q < n; ++q) {
      inputs.p[q] = p.parts[q].op->input;
      outputs.p[q] = p.parts[q].op->output;
    }
    const Op& first = *p.parts[0].op;
    const float divisor = first.reduce == ReduceOp::kAverage ? static_cast<float>(ranks_) : 1.0f;
    switch (first.kind) {
      case SpanKind::kAllreduce: {
        const std::size_t count = first.output_count;
        const std::size_t chunk = (count + n - 1) / n;
        for (std::size_t q = 0; q < n; ++q) {
          const std::size_t begin = std::min(count, q * chunk);
          const std::size_t len = std::min(count, begin + chunk) - begin;
          if (len == 0) continue;
          tandem_shared_reduce<T><<<kBlocks, kThreads, 0, p.parts[q].stream>>>(
              inputs, ranks_, begin, p.parts[q].op->out<T>() + begin, len, divisor);
          TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_reduce");
        }
        if (chunk == 0) return;
        meet(p, 1);
        for (std::size_t q = 0; q < n; ++q) {
          tandem_shared_gather<T><<<kBlocks, kThreads, 0, p.parts[q].stream>>>(
              outputs, chunk, count, 1, static_cast<int>(q), p.parts[q].op->out<T>());
          TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_gather");
        }
        return;
      }
      case SpanKind::kReduceScatter:
        if (first.output_count == 0) return;
        for (std::size_t q = 0; q < n; ++q) {
          tandem_shared_reduce<T><<<kBlocks, kThreads, 0, p.parts[q].stream>>>(
              inputs, ranks_, q * first.output_count, p.parts[q].op->out<T>(), first.output_count,
              divisor);
          TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_reduce");
        }
        return;
      case SpanKind::kAllgather:
        if (first.input_count == 0) return;
        for (std::size_t q = 0; q < n; ++q) {
          tandem_shared_gather<T><<<kBlocks, kThreads, 0, p.parts[q].stream>>>(
              inputs, first.input_count, first.output_count, 0, -1, p.parts[q].op->out<T>());
          TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_gather");
        }
        return;
      case SpanKind::kBroadcast: {
        if (first.output_count == 0) return;
        const auto root = static_cast<std::size_t>(first.peer);
        for (std::size_t q = 0; q < n; ++q) {
          if (q == root) continue;
          tandem_shared_copy<<<kBlocks, kThreads, 0, p.parts[q].stream>>>(
              static_cast<const float*>(p.parts[root].op->output), p.parts[q].op->out<float>(),
              first.output_count);
          TANDEM_CUDA_CHECK_LAUNCH("tandem_shared_copy");
        }
        return;
      }
      default:
        throw RuntimeError("shared: unsupported operation");
    }
  }

  const int device_;
  const int ranks_;
  const std::chrono::nanoseconds timeout_;
  std::vector<cudaEvent_t> events_;  // kEventsPerRank per rank

  std::mutex mutex_;
  std::condition_variable enqueued_;  // an operation was enqueued, a split made, or abort
  std::string released_;              // "aborted: why" once aborted
  std::map<std::uint64_t, Pending> collectives_;  // by number on this world
  std::map<PairKey, Pending> pairs_;
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
           " threads on each rank's stream reading the other ranks' buffers; no interconnect";
  }

 protected:
  std::unique_ptr<ProgressCommunicator> make_split(int color, int key) override {
    auto [child, child_rank] = world_->split(splits_++, rank(), color, key);
    const CurrentDeviceRestorer restore;
    return std::make_unique<SharedGpuComm>(std::move(child), child_rank, timeout());
  }

  // Sends and receives to this rank itself are the base's staged copies; the rest meet
  // their peers (Note [shared-gpu protocol]).
  void enqueue(std::span<Op* const> ops) override {
    std::vector<Op*> shared;
    for (Op* op : ops) {
      if (size() == 1 && op->kind != SpanKind::kSend && op->kind != SpanKind::kRecv) {
        copy_on_stream(op->output, op->input,
                       op->input == op->output ? 0 : op->output_count * op->element_bytes());
      } else if (!enqueue_self_p2p(*op)) {
        shared.push_back(op);
      }
    }
    if (!shared.empty()) world_->issue(rank(), stream(), shared, collectives_, sends_, receives_);
  }

  void on_abort(const std::string& reason) override { world_->release(reason); }
  void on_timeout() override { world_->release("a collective timed out"); }

 private:
  const std::shared_ptr<SharedWorld> world_;
  // Issuing thread only: what this rank issued, for matching (collectives on this world;
  // per peer: sends and receives).
  std::uint64_t collectives_ = 0;
  std::uint64_t splits_ = 0;
  std::vector<std::uint64_t> sends_;
  std::vector<std::uint64_t> receives_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_shared_gpu_world(const BackendOptions& options,
                                                                 int device) {
  if (options.ranks < 1 || options.ranks > kMaxRanks) {
    throw UsageError("--ranks with --device-comm shared: must be 1.." + std::to_string(kMaxRanks) +
                     " ranks on one GPU, got " + std::to_string(options.ranks));
  }
  const auto world = std::make_shared<SharedWorld>(device, options.ranks, options.timeout);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < options.ranks; ++r) {
    out.push_back(std::make_unique<SharedGpuComm>(world, r, options.timeout));
  }
  return out;
}

}  // namespace tandem
