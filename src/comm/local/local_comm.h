// The `local` backend: ranks are threads of one process sharing memory.
//
// A LocalWorld owns the rendezvous state of n ranks; each rank gets a LocalCommunicator
// with its own communication thread that executes operations in issue order. Data moves
// directly between the ranks' buffers (no staging copies): for an allreduce each rank
// reduces its 1/n slice of every buffer in rank order 0..n-1 and writes the result
// into every buffer, so each buffer is read once and written once.
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
