// Internal to the `local` backend: what the ranks of one world share.
//
// - A two-phase collective rendezvous (join, then leave) counted by generation. Between
//   the phases every rank may read and write every other rank's buffers; leave() returns
//   only once all ranks are done with them, so no buffer is released while another rank
//   still touches it.
// - A point-to-point mailbox keyed by (src, dst, tag): an operation waits there until
//   its partner is issued, and whichever side comes second moves the data.
// - Per-rank queues feeding each rank's communication thread.
// - An abort flag: it ends every wait that depends on another rank (join, the mailbox)
//   and fails those operations; waits that only need running ranks (leave) still finish.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "comm/communicator.h"

namespace tandem {

// One issued operation, handed from the issuing thread to the rank's comm thread.
// For allreduce and broadcast, input and output are the same buffer.
struct LocalOp {
  SpanKind kind = SpanKind::kOther;
  int rank = 0;  // the issuing rank
  const float* input = nullptr;
  std::size_t input_count = 0;
  float* output = nullptr;
  std::size_t output_count = 0;
  ReduceOp op = ReduceOp::kSum;
  int peer = -1;  // broadcast: root; send/recv: the other rank
  int tag = 0;    // send/recv matching tag
  WorkPtr work{};
  RankRecorder* recorder = nullptr;  // captured at issue: set_recorder() precedes issuing
  std::int64_t issue_ns = 0;         // when the caller issued it (Span::issue_ns)
};

// A point-to-point operation whose data has moved (or that failed), returned to the comm
// thread of the rank that issued it so that thread records its span and completes it.
struct MatchedOp {
  LocalOp op;
  std::int64_t start_ns = 0;
  std::int64_t data_end_ns = 0;
  std::string error;  // empty: success
};

// Work waiting for one rank's comm thread. Guarded by `mutex`.
struct RankQueue {
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<LocalOp> ops;
  std::deque<MatchedOp> matched;
  int unmatched = 0;  // p2p ops of this rank parked in the mailbox
  bool stopping = false;
};

// The contributions of all ranks to one collective, in rank order.
struct CollectiveGroup {
  std::vector<const LocalOp*> ops;
  std::string error;  // the same on every rank; empty when the group is consistent
};

class LocalWorld {
 public:
  LocalWorld(int ranks, LinkModel link);

  int size() const { return ranks_; }
  const LinkModel& link() const { return link_; }
  RankQueue& queue(int rank) { return *queues_[static_cast<std::size_t>(rank)]; }

  // Phase 1 of a collective: publishes `op` (which must stay alive until leave()) and
  // waits for every rank. Throws RuntimeError if the world aborts first. Every rank that
  // returns must call leave(), also when the group carries an error.
  CollectiveGroup join(int rank, const LocalOp& op);
  // Phase 2: waits until every rank has called leave(). Not abortable: every rank that
  // passed join() gets here without help from any user thread.
  void leave();

  // A send or recv: returns its partner, removed from the mailbox, if that was issued
  // already; otherwise parks `op` until the partner arrives. Throws RuntimeError once
  // the world is aborted.
  std::optional<LocalOp> match_or_park(const LocalOp& op);
  // Hands a matched (or failed) parked op back to its rank's comm thread.
  void hand_back(MatchedOp matched);

  // Ends every wait on other ranks and fails what waits there; idempotent.
  void abort();
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

 private:
  void wait_until_passed(std::unique_lock<std::mutex>& lock, bool abortable);
  std::string validate() const;

  const int ranks_;
  const LinkModel link_;
  std::vector<std::unique_ptr<RankQueue>> queues_;
  std::atomic<bool> aborted_{false};

  // Rendezvous, all under mutex_ (posts_ and group_error_ are also read without it between
  // join() and leave(), when no rank can write them).
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<const LocalOp*> posts_;
  std::string group_error_;

  // Mailbox. Per key, at most one of the two queues is non-empty.
  struct Channel {
    std::deque<LocalOp> sends;
    std::deque<LocalOp> recvs;
  };
  std::mutex mailbox_mutex_;  // taken before any RankQueue::mutex, never after
  std::map<std::tuple<int, int, int>, Channel> channels_;  // (src, dst, tag)
};

inline constexpr const char* kAbortedReason =
    "aborted (a communicator of this world was destroyed)";

}  // namespace tandem
