// The `local` backend: ranks are threads of one process sharing memory.
//
// A LocalWorld (local_world.h) holds the rendezvous of n ranks; each rank gets a
// LocalCommunicator, a ProgressCommunicator (comm/progress_communicator.h) whose
// communication thread starts and tests that rank's operations in issue order. Data moves
// directly between the ranks' buffers (no staging copies): for an allreduce each rank
// reduces its 1/n slice of every buffer in rank order 0..n-1 and writes the result into
// every buffer, so each buffer is read once and written once; reduce_scatter sums the
// same way, so it equals the matching block of an allreduce bit for bit.
//
// One operation at a time per rank, as on one wire: an operation starts once the one
// before it has completed (emulated wire time included). Point to point is the exception:
// a send or recv waiting for its partner (parked) does not hold up what follows, so a
// send and the recv it matches may be issued in either order and exchanges (each rank
// sends, then receives) work.
//
// Link emulation (link_model.h): after the data has moved, an operation completes only
// once its emulated wire time has passed; abort and the timeout cut that wait short.
//
// Lifetime: destroying any communicator of a world aborts the world: operations still
// waiting for another rank fail with RuntimeError ("aborted: ..."), and nothing hangs.
// Destroy the communicators after every rank has waited for its last operation. An
// operation withdrawn by its timeout leaves the world's collective numbering out of step:
// use the communicator for nothing but failing afterwards.
//
// split(): the ranks exchange (color, key) with an allgather on this world (so it takes
// its place in issue order, and shows as one in the timeline), each computes its group,
// and the group's ranks pick up one child world from this one (LocalWorld::split_world),
// with the same link emulation, timeout and recorder.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/link_model.h"
#include "comm/progress_communicator.h"

namespace tandem {

class LocalWorld;

struct LocalOptions {
  int ranks = 1;
  LinkModel link{};  // emulated wire time; disabled by default
  std::chrono::nanoseconds timeout{std::chrono::seconds(300)};
};

// Creates n communicators sharing one world. Each is used by one rank's thread.
std::vector<std::unique_ptr<Communicator>> make_local_communicators(const LocalOptions& options);

class LocalCommunicator final : public ProgressCommunicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalWorld> world, int rank,
                    std::chrono::nanoseconds timeout);
  ~LocalCommunicator() override;

  std::string_view backend_name() const override { return "local"; }
  std::string describe() const override;
  // The world's rendezvous changed in a way this rank may be waiting for.
  void wake_from_world() { wake(); }

 protected:
  bool ready_to_start(const Op& next) override;
  void start(Op& op) override;
  bool test(Op& op) override;
  bool cancel(Op& op) override;
  void on_abort(const std::string& reason) override;
  std::unique_ptr<ProgressCommunicator> make_split(int color, int key) override;

 private:
  bool test_collective(Op& op);
  bool test_p2p(Op& op);
  // Completes once the emulated wire time after data_end_ns has passed.
  bool finish_after_wire(Op& op, std::int64_t data_end_ns);

  std::shared_ptr<LocalWorld> world_;
  std::uint64_t next_seq_ = 0;  // communication thread only
  std::uint64_t next_split_ = 0;  // issuing thread only
};

}  // namespace tandem
