// Rendezvous, mailbox and abort for the ranks of one `local` world.
#include "comm/local/local_world.h"

#include <utility>

#include "core/clock.h"
#include "core/error.h"

namespace tandem {
namespace {

std::string rank_str(int rank) { return "rank " + std::to_string(rank); }

}  // namespace

LocalWorld::LocalWorld(int ranks, LinkModel link)
    : ranks_(ranks), link_(link), posts_(static_cast<std::size_t>(ranks), nullptr) {
  for (int r = 0; r < ranks; ++r) queues_.push_back(std::make_unique<RankQueue>());
}

// Arrives at the current rendezvous generation and blocks until every rank has arrived
// (lock held throughout). Throws RuntimeError if abortable and the world aborts first; the
// arrival is withdrawn then, so no rank can pass this generation without us.
//
// Note [no spinning]: waiters block on the condition variable at once. Spinning first was
// measured (bench/allreduce_bench, 2 cores): it made small allreduces slower (31 us at
// 200 pauses and 1 ms at 20000, against 29 us without), because with more threads than
// cores the spinner takes the core its peer needs; it would also steal cycles from the
// compute that tandem overlaps with communication, which is what it measures.
void LocalWorld::wait_until_passed(std::unique_lock<std::mutex>& lock, bool abortable) {
  const std::uint64_t generation = generation_;
  if (++arrived_ == ranks_) {
    arrived_ = 0;
    if (abortable) group_error_ = validate();
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lock, [&] { return generation_ != generation || (abortable && aborted()); });
  if (generation_ == generation) {
    --arrived_;
    throw RuntimeError(kAbortedReason);
  }
}

CollectiveGroup LocalWorld::join(int rank, const LocalOp& op) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (aborted()) throw RuntimeError(kAbortedReason);
  posts_[static_cast<std::size_t>(rank)] = &op;
  wait_until_passed(lock, /*abortable=*/true);
  // The pointers stay valid until this rank calls leave(): no rank can finish its op
  // before every rank has left.
  return CollectiveGroup{posts_, group_error_};
}

void LocalWorld::leave() {
  std::unique_lock<std::mutex> lock(mutex_);
  wait_until_passed(lock, /*abortable=*/false);
}

// Checks that all ranks issued the same collective with consistent arguments. Runs on
// the last rank to arrive, under mutex_; every rank then reports the same error.
std::string LocalWorld::validate() const {
  const LocalOp& first = *posts_[0];
  const auto n = static_cast<std::size_t>(ranks_);
  for (int r = 0; r < ranks_; ++r) {
    const LocalOp& op = *posts_[static_cast<std::size_t>(r)];
    if (op.kind != first.kind) {
      return "collective mismatch: rank 0 issued " + std::string(to_string(first.kind)) + " but " +
             rank_str(r) + " issued " + std::string(to_string(op.kind));
    }
    if (op.op != first.op) {
      return "reduce op mismatch: rank 0 uses " + std::string(to_string(first.op)) + ", " +
             rank_str(r) + " uses " + std::string(to_string(op.op));
    }
    switch (op.kind) {
      case SpanKind::kReduceScatter:
        if (op.input_count != n * op.output_count) {
          return rank_str(r) + " passed " + std::to_string(op.input_count) +
                 " input elements for " + std::to_string(op.output_count) +
                 " output elements (need size() * output = " + std::to_string(n * op.output_count) +
                 ")";
        }
        break;
      case SpanKind::kAllgather:
        if (op.output_count != n * op.input_count) {
          return rank_str(r) + " passed " + std::to_string(op.output_count) +
                 " output elements for " + std::to_string(op.input_count) +
                 " input elements (need size() * input = " + std::to_string(n * op.input_count) +
                 ")";
        }
        break;
      case SpanKind::kBroadcast:
        if (op.peer < 0 || op.peer >= ranks_) {
          return "root " + std::to_string(op.peer) + " out of range [0, " + std::to_string(ranks_) +
                 ") on " + rank_str(r);
        }
        if (op.peer != first.peer) {
          return "root mismatch: rank 0 uses root " + std::to_string(first.peer) + ", " +
                 rank_str(r) + " uses " + std::to_string(op.peer);
        }
        break;
      default:
        break;
    }
    if (op.output_count != first.output_count) {
      return "size mismatch: rank 0 passed " + std::to_string(first.output_count) + " elements, " +
             rank_str(r) + " passed " + std::to_string(op.output_count);
    }
  }
  return {};
}

std::optional<LocalOp> LocalWorld::match_or_park(const LocalOp& op) {
  const bool is_send = op.kind == SpanKind::kSend;
  const auto key = is_send ? std::make_tuple(op.rank, op.peer, op.tag)
                           : std::make_tuple(op.peer, op.rank, op.tag);
  std::lock_guard<std::mutex> lock(mailbox_mutex_);
  if (aborted()) throw RuntimeError(kAbortedReason);
  Channel& channel = channels_[key];
  std::deque<LocalOp>& partners = is_send ? channel.recvs : channel.sends;
  if (!partners.empty()) {
    LocalOp partner = std::move(partners.front());
    partners.pop_front();
    return partner;
  }
  (is_send ? channel.sends : channel.recvs).push_back(op);
  RankQueue& queue = this->queue(op.rank);
  std::lock_guard<std::mutex> queue_lock(queue.mutex);
  ++queue.unmatched;
  return std::nullopt;
}

void LocalWorld::hand_back(MatchedOp matched) {
  RankQueue& queue = this->queue(matched.op.rank);
  {
    std::lock_guard<std::mutex> lock(queue.mutex);
    queue.matched.push_back(std::move(matched));
    --queue.unmatched;
  }
  queue.cv.notify_all();
}

void LocalWorld::abort() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    aborted_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  // Parked p2p ops will never be matched now: fail them on their own ranks' threads.
  std::lock_guard<std::mutex> lock(mailbox_mutex_);
  const std::int64_t now = now_ns();
  for (auto& [key, channel] : channels_) {
    for (auto* parked : {&channel.sends, &channel.recvs}) {
      for (LocalOp& op : *parked) hand_back(MatchedOp{std::move(op), now, now, kAbortedReason});
      parked->clear();
    }
  }
  channels_.clear();
}

}  // namespace tandem
