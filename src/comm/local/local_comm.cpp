// The `local` backend (local_comm.h): collectives meet in the LocalWorld rendezvous and
// each rank's communication thread moves its share of the data between the ranks'
// buffers.
#include "comm/local/local_comm.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <utility>

#include "comm/local/local_world.h"
#include "core/clock.h"
#include "core/error.h"

namespace tandem {
namespace {

// Reduction block, in elements: the n source blocks and the accumulator of one block
// stay in L1/L2 while it is summed and written back, so each buffer crosses the memory
// bus once in each direction.
constexpr std::size_t kBlockFloats = 2048;  // 8 KiB
// Slices start at multiples of this many elements (one 64-byte cache line of 16-bit
// values, two of floats), so two ranks never write to the same line.
constexpr std::size_t kSliceAlignFloats = 32;

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

// The same over 16-bit values: widened, summed in fp32 in rank order, rounded once into
// out[0, len). `wide` is scratch of len floats.
void reduce_block(DataType type, const std::vector<const std::uint16_t*>& srcs, std::size_t offset,
                  std::size_t len, ReduceOp op, float* acc, float* wide, std::uint16_t* out) {
  widen(type, acc, srcs[0] + offset, len);
  for (std::size_t k = 1; k < srcs.size(); ++k) {
    widen(type, wide, srcs[k] + offset, len);
    add_into(acc, wide, len);
  }
  if (op == ReduceOp::kAverage) divide_by(acc, len, static_cast<float>(srcs.size()));
  narrow(type, out, acc, len);
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

// Reduces elements [begin, end) of every rank's `srcs` into the same elements of `dsts`
// (every rank's buffer for an all-reduce, this rank's output for a reduce-scatter), in
// blocks that stay in cache: each source is read once and each destination written once.
// T is float or std::uint16_t holding values of `type`.
template <typename T>
void reduce_into(DataType type, const std::vector<const T*>& srcs, const std::vector<T*>& dsts,
                 std::size_t begin, std::size_t end, ReduceOp op) {
  alignas(64) float acc[kBlockFloats];
  for (std::size_t b = begin; b < end; b += kBlockFloats) {
    const std::size_t len = std::min(kBlockFloats, end - b);
    if constexpr (std::is_same_v<T, float>) {
      (void)type;
      reduce_block(srcs, b, len, op, acc);
      for (float* dst : dsts) std::memcpy(dst + b, acc, len * sizeof(float));
    } else {
      alignas(64) float wide[kBlockFloats];
      alignas(64) std::uint16_t narrowed[kBlockFloats];
      reduce_block(type, srcs, b, len, op, acc, wide, narrowed);
      for (T* dst : dsts) std::memcpy(dst + b, narrowed, len * sizeof(T));
    }
  }
}

template <typename T>
void reduce_collective(const std::vector<const LocalPost*>& posts, int rank) {
  const LocalPost& mine = *posts[static_cast<std::size_t>(rank)];
  // One rank: any reduction of one operand is the operand, so an all-reduce (in place) or
  // an in-place reduce-scatter moves nothing. Copied through anyway, one rank's 12.6 MB
  // bucket of mlp:4x1024 cost 0.86 ms of a 7.3 ms step, waited for before the update.
  if (posts.size() == 1 && (mine.kind == SpanKind::kAllreduce || mine.input == mine.output)) {
    return;
  }
  std::vector<const T*> srcs;
  std::vector<T*> dsts;
  if (mine.kind == SpanKind::kAllreduce) {
    // Reduce my slice of every buffer, then write the result into every buffer.
    for (const LocalPost* p : posts) {
      srcs.push_back(static_cast<const T*>(p->output));
      dsts.push_back(static_cast<T*>(p->output));
    }
    const auto [begin, end] = slice_of(mine.output_count, static_cast<int>(posts.size()), rank);
    reduce_into(mine.type, srcs, dsts, begin, end, mine.reduce);
    return;
  }
  // Reduce-scatter: my output is the reduction of block `rank` of every input, in rank
  // order: the same sums as the allreduce's.
  const std::size_t m = mine.output_count;
  for (const LocalPost* p : posts) {
    srcs.push_back(static_cast<const T*>(p->input) + m * static_cast<std::size_t>(rank));
  }
  // Offsets index the sources from their block; the output starts at 0 as well.
  dsts.push_back(static_cast<T*>(mine.output));
  reduce_into(mine.type, srcs, dsts, 0, m, mine.reduce);
}

// This rank's share of a formed collective; every rank runs its own concurrently.
void move_data(const std::vector<const LocalPost*>& posts, int rank) {
  const LocalPost& mine = *posts[static_cast<std::size_t>(rank)];
  switch (mine.kind) {
    case SpanKind::kAllreduce:
    case SpanKind::kReduceScatter:
      if (mine.type == DataType::kFloat32) {
        reduce_collective<float>(posts, rank);
      } else {
        reduce_collective<std::uint16_t>(posts, rank);
      }
      break;
    case SpanKind::kAllgather: {
      // Pull every rank's input into my output; skip my own block if it is in place.
      const std::size_t m = mine.input_count;
      for (std::size_t k = 0; k < posts.size(); ++k) {
        float* dst = static_cast<float*>(mine.output) + k * m;
        if (m > 0 && dst != posts[k]->input) std::memcpy(dst, posts[k]->input, m * sizeof(float));
      }
      break;
    }
    case SpanKind::kBroadcast: {
      const LocalPost& root = *posts[static_cast<std::size_t>(mine.peer)];
      // An empty span may carry a null pointer, which memcpy must never see.
      if (rank != mine.peer && mine.output_count > 0) {
        std::memcpy(mine.output, root.input, mine.output_count * sizeof(float));
      }
      break;
    }
    default:  // barrier: the rendezvous is all there is
      break;
  }
}

LocalPost post_of(const Op& op, int rank) {
  return {.kind = op.kind,
          .rank = rank,
          .type = op.type,
          .input = op.input,
          .input_count = op.input_count,
          .output = op.output,
          .output_count = op.output_count,
          .reduce = op.reduce,
          .peer = op.peer,
          .tag = op.tag};
}

struct CollectiveState final : OpState {
  LocalPost post;
  std::uint64_t seq = 0;
  bool moved = false;     // this rank's share is done
  bool released = false;  // the group is done; only wire time may remain
  std::int64_t data_end_ns = 0;
};

struct P2pOpState final : OpState {
  LocalWorld::P2p p2p;
};

bool is_p2p(const Op& op) { return op.kind == SpanKind::kSend || op.kind == SpanKind::kRecv; }

}  // namespace

LocalCommunicator::LocalCommunicator(std::shared_ptr<LocalWorld> world, int rank,
                                     std::chrono::nanoseconds timeout)
    : ProgressCommunicator({.rank = rank, .size = world->size(), .timeout = timeout}),
      world_(std::move(world)) {
  const std::string aborted = world_->join(rank, this);
  start_thread();
  if (!aborted.empty()) abort(aborted);
}

LocalCommunicator::~LocalCommunicator() {
  abort("a communicator of this world was destroyed");
  stop_thread();
  world_->leave(rank());
}

std::string LocalCommunicator::describe() const {
  std::string text = "local (threads of one process, shared memory";
  if (world_->link().enabled()) text += ", link " + world_->link().describe();
  return text + ")";
}

void LocalCommunicator::on_abort(const std::string& reason) { world_->abort(reason); }

void LocalCommunicator::start(Op& op) {
  op.start_ns = now_ns();  // the post: a partner already waiting moves the data right here
  if (is_p2p(op)) {
    auto state = std::make_unique<P2pOpState>();
    state->p2p.post = post_of(op, rank());
    P2pOpState* raw = state.get();
    op.state = std::move(state);
    world_->match(&raw->p2p);
    return;
  }
  auto state = std::make_unique<CollectiveState>();
  state->post = post_of(op, rank());
  state->seq = next_seq_++;
  CollectiveState* raw = state.get();
  op.state = std::move(state);
  world_->post(raw->seq, &raw->post);
}

bool LocalCommunicator::ready_to_start(const Op& next) {
  (void)next;
  for (const Op& op : ops_in_flight()) {
    if (!is_p2p(op)) return false;
    const auto& st = static_cast<const P2pOpState&>(*op.state);
    if (world_->snapshot(&st.p2p).state != LocalWorld::P2pState::kParked) return false;
  }
  return true;
}

bool LocalCommunicator::test(Op& op) { return is_p2p(op) ? test_p2p(op) : test_collective(op); }

bool LocalCommunicator::test_collective(Op& op) {
  auto& st = static_cast<CollectiveState&>(*op.state);
  if (!st.released) {
    LocalWorld::GroupView group = world_->view(st.seq);
    if (!group.formed) return false;
    if (!st.moved) {
      if (group.error.empty()) move_data(group.posts, rank());
      st.moved = true;
      world_->moved(st.seq);
      group = world_->view(st.seq);
    }
    if (!group.all_moved) return false;
    st.data_end_ns = group.data_end_ns;
    st.released = true;
    world_->release(st.seq);
    if (!group.error.empty()) throw RuntimeError(group.error);
  }
  return finish_after_wire(op, st.data_end_ns);
}

bool LocalCommunicator::test_p2p(Op& op) {
  auto& st = static_cast<P2pOpState&>(*op.state);
  const LocalWorld::P2p now = world_->snapshot(&st.p2p);
  if (now.state != LocalWorld::P2pState::kDone) return false;
  if (!now.error.empty()) throw RuntimeError(now.error);
  return finish_after_wire(op, now.data_end_ns);
}

// The span keeps the skeleton's start, when this rank posted the operation: it includes
// the wait for the last rank to post (skew, analysis/waiting.h), as an MPI request's or an
// NCCL kernel's does.
bool LocalCommunicator::finish_after_wire(Op& op, std::int64_t data_end_ns) {
  const OpInfo& info = op.work->info();
  const std::int64_t wire_ns = world_->link().wire_time_ns(info.kind, info.bytes, size());
  if (wire_ns <= 0) {
    op.end_ns = data_end_ns;
    return true;
  }
  // Emulation of an offloaded NIC still busy on the wire, not synchronization.
  const std::int64_t wire_end = data_end_ns + wire_ns;
  const std::int64_t now = now_ns();
  if (now < wire_end) {
    op.wake_ns = wire_end;
    return false;
  }
  op.end_ns = now;
  return true;
}

bool LocalCommunicator::cancel(Op& op) {
  if (!op.state) return true;
  if (is_p2p(op)) return world_->withdraw(&static_cast<P2pOpState&>(*op.state).p2p);
  auto& st = static_cast<CollectiveState&>(*op.state);
  if (st.released) return true;  // only emulated wire time is left
  if (st.moved) return false;    // peers may still read or write this rank's buffer
  return world_->withdraw(st.seq, rank());
}

// Note [split exchange]: the host contract moves floats only; an int travels as its two
// 16-bit halves, each exact in fp32.
std::unique_ptr<ProgressCommunicator> LocalCommunicator::make_split(int color, int key) {
  constexpr std::size_t kFloatsPerRank = 4;
  const auto halves = [](int v, float* out) {
    const auto u = static_cast<std::uint32_t>(v);
    out[0] = static_cast<float>(u >> 16);
    out[1] = static_cast<float>(u & 0xffffu);
  };
  const auto whole = [](const float* in) {
    return static_cast<int>((static_cast<std::uint32_t>(in[0]) << 16) |
                            static_cast<std::uint32_t>(in[1]));
  };
  std::vector<float> mine(kFloatsPerRank);
  halves(color, &mine[0]);
  halves(key, &mine[2]);
  std::vector<float> all(kFloatsPerRank * static_cast<std::size_t>(size()));
  allgather(mine, all)->wait();
  // The group: ranks of my color, ordered by (key, rank here).
  std::vector<std::pair<int, int>> group;  // (key, rank)
  for (int r = 0; r < size(); ++r) {
    const float* theirs = all.data() + kFloatsPerRank * static_cast<std::size_t>(r);
    if (whole(theirs) == color) group.emplace_back(whole(theirs + 2), r);
  }
  std::sort(group.begin(), group.end());
  const auto me = std::find(group.begin(), group.end(), std::make_pair(key, rank()));
  TANDEM_CHECK(me != group.end());
  const int child_rank = static_cast<int>(me - group.begin());
  const int child_size = static_cast<int>(group.size());
  return std::make_unique<LocalCommunicator>(world_->split_world(next_split_++, color, child_size),
                                             child_rank, timeout());
}

std::vector<std::unique_ptr<Communicator>> make_local_communicators(const LocalOptions& options) {
  if (options.ranks < 1) {
    throw UsageError("ranks must be at least 1, got " + std::to_string(options.ranks));
  }
  auto world = std::make_shared<LocalWorld>(options.ranks, options.link);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (int r = 0; r < options.ranks; ++r) {
    comms.push_back(std::make_unique<LocalCommunicator>(world, r, options.timeout));
  }
  return comms;
}

}  // namespace tandem
