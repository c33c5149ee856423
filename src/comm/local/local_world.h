// Internal to the `local` backend: what the ranks of one world share.
//
// - Collectives meet by sequence number: the k-th collective each rank starts belongs to
//   group k. A group forms once every rank has posted to it; from then on every rank may
//   read and write every other rank's buffers, and each rank's communication thread
//   moves its own share of the data. A group is complete once every share has moved;
//   only then may any rank's operation complete, so no buffer is released while another
//   rank still touches it.
// - A point-to-point mailbox keyed by (src, dst, tag): an operation parks there until its
//   partner is started, and whichever side comes second copies the data.
// - Abort: posts to groups that have not formed and parked point-to-point operations can
//   be withdrawn (they fail); formed groups run to their end, which needs only the
//   ranks' communication threads.
// - Split: the ranks of one color pick up one child world (split_world), made by
//   whichever of them comes first, with this world's link model.
// Every call is made from a rank's communication thread, except join(), leave(),
// split_world() and abort().
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm/link_model.h"
#include "comm/progress_communicator.h"

namespace tandem {

class LocalCommunicator;

// One rank's part of an operation, as its peers see it. Lives in the Op's state until
// the operation has left the world.
struct LocalPost {
  SpanKind kind = SpanKind::kOther;
  int rank = 0;
  DataType type = DataType::kFloat32;  // input and output hold elements of this type
  const void* input = nullptr;
  std::size_t input_count = 0;
  void* output = nullptr;
  std::size_t output_count = 0;
  ReduceOp reduce = ReduceOp::kSum;
  int peer = -1;
  int tag = 0;
};

class LocalWorld {
 public:
  LocalWorld(int ranks, LinkModel link);

  int size() const { return ranks_; }
  const LinkModel& link() const { return link_; }

  // Returns "" or, when this world was aborted already, the reason (the member aborts
  // itself: a rank joining a split's child after a peer's failure must not wait for it).
  std::string join(int rank, LocalCommunicator* member);
  void leave(int rank);

  // The child world of `color` for this world's split number `split` (every rank counts
  // its splits alike), of `ranks` ranks; the same object for every rank that asks.
  std::shared_ptr<LocalWorld> split_world(std::uint64_t split, int color, int ranks);

  // ---- collectives ----
  // Posts `post` as this rank's part of group `seq`; wakes every rank once it forms.
  void post(std::uint64_t seq, const LocalPost* post);
  // What a rank may do with group `seq` now.
  struct GroupView {
    bool formed = false;
    std::vector<const LocalPost*> posts;  // in rank order, once formed
    std::string error;                    // the same on every rank; empty when consistent
    bool all_moved = false;
    std::int64_t data_end_ns = 0;  // when the last share moved
  };
  GroupView view(std::uint64_t seq);
  // This rank's share has moved; wakes every rank once all have.
  void moved(std::uint64_t seq);
  // This rank is done with group `seq` (all shares moved; it will not look again).
  void release(std::uint64_t seq);
  // Takes this rank's post back if the group has not formed; false if it has.
  bool withdraw(std::uint64_t seq, int rank);

  // ---- point to point ----
  enum class P2pState : std::uint8_t { kParked, kCopying, kDone };
  struct P2p {
    LocalPost post;
    P2pState state = P2pState::kParked;
    std::int64_t data_end_ns = 0;
    std::string error;
  };
  // Parks `mine` or, if its partner waits already, copies the data between them.
  void match(P2p* mine);
  // Under the world's lock: this operation's state.
  P2p snapshot(const P2p* mine);
  // Takes a parked operation back; false while its data is being copied.
  bool withdraw(P2p* mine);

  // Aborts every member (Communicator::abort) once; idempotent.
  void abort(const std::string& reason);

 private:
  struct Group {
    std::vector<const LocalPost*> posts;
    int posted = 0;
    int moved = 0;
    int released = 0;
    std::string error;
    std::int64_t data_end_ns = 0;
  };
  std::string validate(const Group& group) const;
  void wake_all();  // with mutex_ held

  const int ranks_;
  const LinkModel link_;
  std::mutex mutex_;
  std::vector<LocalCommunicator*> members_;
  std::map<std::uint64_t, Group> groups_;
  std::map<std::tuple<int, int, int>, std::deque<P2p*>> sends_, recvs_;  // (src, dst, tag)
  struct PendingSplit {
    std::shared_ptr<LocalWorld> world;
    int taken = 0;  // ranks that picked it up; dropped from the map once all did
  };
  std::map<std::pair<std::uint64_t, int>, PendingSplit> splits_;  // (split, color)
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;  // under mutex_
};

}  // namespace tandem
