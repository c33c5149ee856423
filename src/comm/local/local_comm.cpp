// The `local` backend: one communication thread per rank executes that rank's operations
// in issue order; collectives meet in the LocalWorld rendezvous and move data directly
// between the ranks' buffers.
#include "comm/local/local_comm.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "comm/local/local_world.h"
#include "core/clock.h"
#include "core/error.h"

namespace tandem {
namespace {

// Reduction block, in floats: the n source blocks and the accumulator of one block
// stay in L1/L2 while it is summed and written back, so each buffer crosses the memory
// bus once in each direction.
constexpr std::size_t kBlockFloats = 2048;  // 8 KiB
// Slices start at multiples of this many floats (one 64-byte cache line), so two ranks
// never write to the same line.
constexpr std::size_t kSliceAlignFloats = 16;

void add_into(float* __restrict acc, const float* __restrict src, std::size_t len) {
  for (std::size_t i = 0; i < len; ++i) acc[i] += src[i];
}

void divide_by(float* __restrict acc, std::size_t len, float n) {
  for (std::size_t i = 0; i < len; ++i) acc[i] /= n;
}

// acc[0, len) := op over ranks k = 0..n-1 of srcs[k][offset, offset + len), summed in
// rank order so the result does not depend on how a buffer is cut into operations.
void reduce_block(const std::vector<const float*>& srcs, std::size_t offset, std::size_t len,
                  ReduceOp op, float* acc) {
  std::memcpy(acc, srcs[0] + offset, len * sizeof(float));
  for (std::size_t k = 1; k < srcs.size(); ++k) add_into(acc, srcs[k] + offset, len);
  if (op == ReduceOp::kAverage) divide_by(acc, len, static_cast<float>(srcs.size()));
}

// This rank's share [begin, end) of `count` elements split over n ranks.
std::pair<std::size_t, std::size_t> slice_of(std::size_t count, int n, int rank) {
  const std::size_t per_rank =
      (count + static_cast<std::size_t>(n) - 1) / static_cast<std::size_t>(n);
  const std::size_t chunk =
      (per_rank + kSliceAlignFloats - 1) / kSliceAlignFloats * kSliceAlignFloats;
  const std::size_t begin = std::min(count, chunk * static_cast<std::size_t>(rank));
  return {begin, std::min(count, begin + chunk)};
}

std::int64_t payload_bytes(const LocalOp& op) {
  const std::size_t count = op.kind == SpanKind::kReduceScatter || op.kind == SpanKind::kSend
                                ? op.input_count
                                : op.output_count;
  return static_cast<std::int64_t>(count * sizeof(float));
}

class LocalCommunicator final : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalWorld> world, int rank)
      : world_(std::move(world)), rank_(rank), queue_(world_->queue(rank)) {
    thread_ = std::thread([this] { run(); });
  }

  // Destroying any rank aborts the world (see local_comm.h), then drains this rank's
  // queue, which fails fast from here on, and joins the comm thread.
  ~LocalCommunicator() override {
    world_->abort();
    {
      std::lock_guard<std::mutex> lock(queue_.mutex);
      queue_.stopping = true;
    }
    queue_.cv.notify_all();
    thread_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  std::string_view backend_name() const override { return "local"; }

  WorkPtr allreduce(std::span<float> data, ReduceOp op, OpInfo info) override {
    return issue({.kind = SpanKind::kAllreduce,
                  .input = data.data(),
                  .input_count = data.size(),
                  .output = data.data(),
                  .output_count = data.size(),
                  .op = op},
                 info);
  }
  WorkPtr reduce_scatter(std::span<const float> input, std::span<float> output, ReduceOp op,
                         OpInfo info) override {
    return issue({.kind = SpanKind::kReduceScatter,
                  .input = input.data(),
                  .input_count = input.size(),
                  .output = output.data(),
                  .output_count = output.size(),
                  .op = op},
                 info);
  }
  WorkPtr allgather(std::span<const float> input, std::span<float> output, OpInfo info) override {
    return issue({.kind = SpanKind::kAllgather,
                  .input = input.data(),
                  .input_count = input.size(),
                  .output = output.data(),
                  .output_count = output.size()},
                 info);
  }
  WorkPtr broadcast(std::span<float> data, int root, OpInfo info) override {
    return issue({.kind = SpanKind::kBroadcast,
                  .input = data.data(),
                  .input_count = data.size(),
                  .output = data.data(),
                  .output_count = data.size(),
                  .peer = root},
                 info);
  }
  WorkPtr barrier(OpInfo info) override { return issue({.kind = SpanKind::kBarrier}, info); }
  WorkPtr send(std::span<const float> data, int peer, int tag, OpInfo info) override {
    return issue({.kind = SpanKind::kSend,
                  .input = data.data(),
                  .input_count = data.size(),
                  .peer = peer,
                  .tag = tag},
                 info);
  }
  WorkPtr recv(std::span<float> data, int peer, int tag, OpInfo info) override {
    return issue({.kind = SpanKind::kRecv,
                  .output = data.data(),
                  .output_count = data.size(),
                  .peer = peer,
                  .tag = tag},
                 info);
  }

 private:
  // Caller's thread: wraps the op in a Work and queues it; never blocks on peers.
  WorkPtr issue(LocalOp op, OpInfo info) {
    op.rank = rank_;
    op.recorder = recorder();
    op.issue_ns = now_ns();
    // The operation itself is the truth about its kind and payload.
    info.kind = op.kind;
    info.bytes = payload_bytes(op);
    op.work = std::make_shared<Work>(info);
    WorkPtr work = op.work;
    {
      std::lock_guard<std::mutex> lock(queue_.mutex);
      queue_.ops.push_back(std::move(op));
    }
    queue_.cv.notify_all();
    return work;
  }

  // Comm thread: runs queued ops in order; completes matched p2p ops as they come back.
  // Exits once stopping and nothing of this rank is queued or parked in the mailbox.
  void run() {
    for (;;) {
      std::deque<MatchedOp> matched;
      std::optional<LocalOp> op;
      {
        std::unique_lock<std::mutex> lock(queue_.mutex);
        queue_.cv.wait(lock, [this] {
          return !queue_.ops.empty() || !queue_.matched.empty() ||
                 (queue_.stopping && queue_.unmatched == 0);
        });
        if (!queue_.matched.empty()) {
          matched.swap(queue_.matched);
        } else if (!queue_.ops.empty()) {
          op = std::move(queue_.ops.front());
          queue_.ops.pop_front();
        } else {
          return;
        }
      }
      for (MatchedOp& m : matched) complete_matched(m);
      if (op) execute(*op);
    }
  }

  void execute(LocalOp& op) {
    try {
      if (op.kind == SpanKind::kSend || op.kind == SpanKind::kRecv) {
        run_p2p(op);
      } else {
        run_collective(op);
      }
    } catch (const std::exception& e) {
      fail(op, e.what());
    }
  }

  void run_collective(LocalOp& op) {
    const CollectiveGroup group = world_->join(rank_, op);
    const std::int64_t start = now_ns();
    if (group.error.empty()) move_data(group.ops);
    world_->leave();
    if (!group.error.empty()) throw RuntimeError(group.error);
    complete(op, start, now_ns());
  }

  // This rank's part of a collective; all ranks run theirs concurrently.
  void move_data(const std::vector<const LocalOp*>& ops) {
    const LocalOp& mine = *ops[static_cast<std::size_t>(rank_)];
    const int n = size();
    switch (mine.kind) {
      case SpanKind::kAllreduce: {
        // Reduce my slice of every buffer, then write the result into every buffer.
        std::vector<const float*> srcs;
        for (const LocalOp* o : ops) srcs.push_back(o->output);
        const auto [begin, end] = slice_of(mine.output_count, n, rank_);
        alignas(64) float acc[kBlockFloats];
        for (std::size_t b = begin; b < end; b += kBlockFloats) {
          const std::size_t len = std::min(kBlockFloats, end - b);
          reduce_block(srcs, b, len, mine.op, acc);
          for (const LocalOp* o : ops) std::memcpy(o->output + b, acc, len * sizeof(float));
        }
        break;
      }
      case SpanKind::kReduceScatter: {
        // My output is the reduction of block `rank_` of every input.
        std::vector<const float*> srcs;
        const std::size_t m = mine.output_count;
        for (const LocalOp* o : ops) srcs.push_back(o->input + m * static_cast<std::size_t>(rank_));
        alignas(64) float acc[kBlockFloats];
        for (std::size_t b = 0; b < m; b += kBlockFloats) {
          const std::size_t len = std::min(kBlockFloats, m - b);
          reduce_block(srcs, b, len, mine.op, acc);
          std::memcpy(mine.output + b, acc, len * sizeof(float));
        }
        break;
      }
      case SpanKind::kAllgather: {
        // Pull every rank's input into my output; skip my own block if it is in place.
        const std::size_t m = mine.input_count;
        for (std::size_t k = 0; k < ops.size(); ++k) {
          float* dst = mine.output + k * m;
          if (m > 0 && dst != ops[k]->input) std::memcpy(dst, ops[k]->input, m * sizeof(float));
        }
        break;
      }
      case SpanKind::kBroadcast: {
        const LocalOp& root = *ops[static_cast<std::size_t>(mine.peer)];
        // An empty span may carry a null pointer, which memcpy must never see.
        if (rank_ != mine.peer && mine.output_count > 0) {
          std::memcpy(mine.output, root.input, mine.output_count * sizeof(float));
        }
        break;
      }
      default:  // barrier: the rendezvous is all there is
        break;
    }
  }

  void run_p2p(LocalOp& op) {
    if (op.peer < 0 || op.peer >= size()) {
      throw RuntimeError("peer " + std::to_string(op.peer) + " out of range [0, " +
                         std::to_string(size()) + ")");
    }
    std::optional<LocalOp> partner = world_->match_or_park(op);
    if (!partner) return;  // parked: the partner's comm thread moves the data
    const LocalOp& sender = op.kind == SpanKind::kSend ? op : *partner;
    const LocalOp& receiver = op.kind == SpanKind::kSend ? *partner : op;
    std::string error;
    const std::int64_t start = now_ns();
    if (sender.input_count != receiver.output_count) {
      error = "size mismatch: rank " + std::to_string(sender.rank) + " sends " +
              std::to_string(sender.input_count) + " elements, rank " +
              std::to_string(receiver.rank) + " receives " + std::to_string(receiver.output_count);
    } else if (sender.input_count > 0) {
      std::memcpy(receiver.output, sender.input, sender.input_count * sizeof(float));
    }
    const std::int64_t end = now_ns();
    world_->hand_back(MatchedOp{std::move(*partner), start, end, error});
    MatchedOp own{std::move(op), start, end, std::move(error)};
    complete_matched(own);
  }

  void complete_matched(MatchedOp& m) {
    if (!m.error.empty()) {
      fail(m.op, m.error);
    } else {
      complete(m.op, m.start_ns, m.data_end_ns);
    }
  }

  // Adds the emulated wire time, records the comm span, then completes the Work (in that
  // order, so whoever waits on the Work also sees the span).
  void complete(const LocalOp& op, std::int64_t start_ns, std::int64_t data_end_ns) {
    const OpInfo& info = op.work->info();
    std::int64_t end_ns = data_end_ns;
    const std::int64_t wire_ns = world_->link().wire_time_ns(info.kind, info.bytes, size());
    if (wire_ns > 0) {
      // Emulation of an offloaded NIC still busy on the wire, not synchronization.
      std::this_thread::sleep_until(
          std::chrono::steady_clock::time_point(std::chrono::nanoseconds(data_end_ns + wire_ns)));
      end_ns = std::max(now_ns(), data_end_ns + wire_ns);
    }
    if (op.recorder != nullptr) {
      Span span = info.comm_span(start_ns, end_ns);
      span.issue_ns = op.issue_ns;
      op.recorder->record(span);
    }
    op.work->mark_started(start_ns);
    op.work->finish(end_ns);
  }

  void fail(const LocalOp& op, const std::string& reason) {
    const std::string message =
        op.work->info().describe() + " on rank " + std::to_string(rank_) + ": " + reason;
    op.work->fail(std::make_exception_ptr(RuntimeError(message)), now_ns());
  }

  std::shared_ptr<LocalWorld> world_;
  const int rank_;
  RankQueue& queue_;
  std::thread thread_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_local_communicators(const LocalOptions& options) {
  if (options.ranks < 1) {
    throw UsageError("ranks must be at least 1, got " + std::to_string(options.ranks));
  }
  auto world = std::make_shared<LocalWorld>(options.ranks, options.link);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < options.ranks; ++r) {
    comms.push_back(std::make_unique<LocalCommunicator>(world, r));
  }
  return comms;
}

}  // namespace tandem
