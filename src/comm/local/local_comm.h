// The `local` backend: ranks are threads of one process sharing memory.
//
// A LocalWorld owns the rendezvous state of n ranks; each rank gets a LocalCommunicator
// with its own communication thread that executes operations in issue order. Data moves
// directly between the ranks' buffers (no staging copies): for an allreduce each rank
// reduces its 1/n slice of every buffer in rank order 0..n-1 and writes the result
// into every buffer, so each buffer is read once and written once.
//
// Point to point: a send and the recv it matches may be issued in either order; neither
// blocks its comm thread while waiting for the other, so exchanges (each rank sends, then
// receives) work.
//
// Lifetime: destroying any communicator of a world aborts the world: operations still
// waiting for another rank fail with RuntimeError ("aborted ..."), and nothing hangs.
// Destroy the communicators after every rank has waited for its last operation.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace tandem {

class LocalWorld;

struct LocalOptions {
  int ranks = 1;
  LinkModel link{};  // emulated wire time; disabled by default
};

// Creates n communicators sharing one world. Each is used by one rank's thread.
std::vector<std::unique_ptr<Communicator>> make_local_communicators(const LocalOptions& options);

}  // namespace tandem
