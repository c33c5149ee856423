// Rendezvous, mailbox and abort for the ranks of one `local` world (local_world.h).
#include "comm/local/local_world.h"

#include <cstring>

#include "comm/local/local_comm.h"
#include "core/clock.h"
#include "core/error.h"

namespace tandem {
namespace {

std::string rank_str(int rank) { return "rank " + std::to_string(rank); }

}  // namespace

LocalWorld::LocalWorld(int ranks, LinkModel link)
    : ranks_(ranks), link_(link), members_(static_cast<std::size_t>(ranks), nullptr) {}

std::string LocalWorld::join(int rank, LocalCommunicator* member) {
  std::lock_guard lock(mutex_);
  members_[static_cast<std::size_t>(rank)] = member;
  return abort_reason_;
}

std::shared_ptr<LocalWorld> LocalWorld::split_world(std::uint64_t split, int color, int ranks) {
  std::lock_guard lock(mutex_);
  PendingSplit& pending = splits_[{split, color}];
  if (pending.world == nullptr) pending.world = std::make_shared<LocalWorld>(ranks, link_);
  std::shared_ptr<LocalWorld> world = pending.world;
  if (++pending.taken == ranks) splits_.erase({split, color});
  return world;
}

void LocalWorld::leave(int rank) {
  std::lock_guard lock(mutex_);
  members_[static_cast<std::size_t>(rank)] = nullptr;
}

void LocalWorld::wake_all() {
  for (LocalCommunicator* member : members_) {
    if (member != nullptr) member->wake_from_world();
  }
}

void LocalWorld::post(std::uint64_t seq, const LocalPost* post) {
  std::lock_guard lock(mutex_);
  Group& group = groups_[seq];
  if (group.posts.empty()) group.posts.assign(static_cast<std::size_t>(ranks_), nullptr);
  TANDEM_CHECK(group.posts[static_cast<std::size_t>(post->rank)] == nullptr);
  group.posts[static_cast<std::size_t>(post->rank)] = post;
  if (++group.posted == ranks_) {
    group.error = validate(group);
    wake_all();
  }
}

LocalWorld::GroupView LocalWorld::view(std::uint64_t seq) {
  std::lock_guard lock(mutex_);
  const Group& group = groups_.at(seq);
  GroupView view;
  view.formed = group.posted == ranks_;
  if (!view.formed) return view;
  view.posts = group.posts;
  view.error = group.error;
  view.all_moved = group.moved == ranks_;
  view.data_end_ns = group.data_end_ns;
  return view;
}

void LocalWorld::moved(std::uint64_t seq) {
  std::lock_guard lock(mutex_);
  Group& group = groups_.at(seq);
  if (++group.moved == ranks_) {
    group.data_end_ns = now_ns();
    wake_all();
  }
}

void LocalWorld::release(std::uint64_t seq) {
  std::lock_guard lock(mutex_);
  const auto it = groups_.find(seq);
  if (it != groups_.end() && ++it->second.released == ranks_) groups_.erase(it);
}

bool LocalWorld::withdraw(std::uint64_t seq, int rank) {
  std::lock_guard lock(mutex_);
  const auto it = groups_.find(seq);
  if (it == groups_.end()) return true;
  Group& group = it->second;
  if (group.posted == ranks_) return false;
  const auto r = static_cast<std::size_t>(rank);
  if (group.posts[r] != nullptr) {
    group.posts[r] = nullptr;
    --group.posted;
  }
  if (group.posted == 0) groups_.erase(it);
  return true;
}

// Checks that all ranks issued the same collective with consistent arguments. Runs on
// the last rank to arrive, under mutex_; every rank then reports the same error.
std::string LocalWorld::validate(const Group& group) const {
  const LocalPost& first = *group.posts[0];
  for (int r = 0; r < ranks_; ++r) {
    const LocalPost& p = *group.posts[static_cast<std::size_t>(r)];
    if (p.kind != first.kind) {
      return "collective mismatch: rank 0 issued " + std::string(to_string(first.kind)) + " but " +
             rank_str(r) + " issued " + std::string(to_string(p.kind));
    }
    if (p.type != first.type) {
      return "data type mismatch: rank 0 passed " + std::string(to_string(first.type)) + ", " +
             rank_str(r) + " passed " + std::string(to_string(p.type));
    }
    if (p.reduce != first.reduce) {
      return "reduce op mismatch: rank 0 uses " + std::string(to_string(first.reduce)) + ", " +
             rank_str(r) + " uses " + std::string(to_string(p.reduce));
    }
    if (p.kind == SpanKind::kBroadcast && p.peer != first.peer) {
      return "root mismatch: rank 0 uses root " + std::to_string(first.peer) + ", " + rank_str(r) +
             " uses " + std::to_string(p.peer);
    }
    if (p.output_count != first.output_count) {
      return "size mismatch: rank 0 passed " + std::to_string(first.output_count) +
             " elements, " + rank_str(r) + " passed " + std::to_string(p.output_count);
    }
  }
  return {};
}

void LocalWorld::match(P2p* mine) {
  const bool is_send = mine->post.kind == SpanKind::kSend;
  const LocalPost& p = mine->post;
  const auto key = is_send ? std::make_tuple(p.rank, p.peer, p.tag)
                           : std::make_tuple(p.peer, p.rank, p.tag);
  P2p* partner = nullptr;
  {
    std::lock_guard lock(mutex_);
    std::deque<P2p*>& waiting = is_send ? recvs_[key] : sends_[key];
    if (waiting.empty()) {
      (is_send ? sends_ : recvs_)[key].push_back(mine);
      return;
    }
    partner = waiting.front();
    waiting.pop_front();
    partner->state = P2pState::kCopying;
    mine->state = P2pState::kCopying;
  }
  // Outside the lock: a large copy must not stall every other rank's rendezvous.
  P2p& sender = is_send ? *mine : *partner;
  P2p& receiver = is_send ? *partner : *mine;
  std::string error;
  if (sender.post.input_count != receiver.post.output_count) {
    error = "size mismatch: rank " + std::to_string(sender.post.rank) + " sends " +
            std::to_string(sender.post.input_count) + " elements, rank " +
            std::to_string(receiver.post.rank) + " receives " +
            std::to_string(receiver.post.output_count);
  } else if (sender.post.input_count > 0) {
    std::memcpy(receiver.post.output, sender.post.input,
                sender.post.input_count * sizeof(float));
  }
  const std::int64_t end = now_ns();
  std::lock_guard lock(mutex_);
  for (P2p* side : {&sender, &receiver}) {
    side->state = P2pState::kDone;
    side->data_end_ns = end;
    side->error = error;
  }
  LocalCommunicator* other = members_[static_cast<std::size_t>(partner->post.rank)];
  if (other != nullptr) other->wake_from_world();
}

LocalWorld::P2p LocalWorld::snapshot(const P2p* mine) {
  std::lock_guard lock(mutex_);
  return *mine;
}

bool LocalWorld::withdraw(P2p* mine) {
  std::lock_guard lock(mutex_);
  if (mine->state == P2pState::kCopying) return false;
  if (mine->state == P2pState::kDone) return true;
  const LocalPost& p = mine->post;
  const bool is_send = p.kind == SpanKind::kSend;
  const auto key = is_send ? std::make_tuple(p.rank, p.peer, p.tag)
                           : std::make_tuple(p.peer, p.rank, p.tag);
  std::deque<P2p*>& parked = (is_send ? sends_ : recvs_)[key];
  std::erase(parked, mine);
  return true;
}

void LocalWorld::abort(const std::string& reason) {
  if (aborted_.exchange(true)) return;
  // Under the lock, so no member leaves (and dies) meanwhile. A member's abort() calls
  // back into this function, which returns at once now, and takes no world lock.
  std::lock_guard lock(mutex_);
  abort_reason_ = reason;
  for (LocalCommunicator* member : members_) {
    if (member != nullptr) member->abort(reason);
  }
}

}  // namespace tandem
