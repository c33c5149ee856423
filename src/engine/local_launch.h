// Runs n ranks as threads of this process over the local backend: one communicator and
// one span recorder per rank, the first failure rethrown after every thread is joined.
// A rank that fails aborts the world, so its peers' pending collectives fail instead of
// waiting for it forever.
#pragma once

#include <functional>

#include "comm/local/local_comm.h"
#include "timeline/recorder.h"

namespace tandem {

struct LocalRunOptions {
  int ranks = 1;
  LinkModel link{};
  std::size_t span_capacity_per_lane = 4096;
  bool record = true;
};

struct LocalRunTimeline {
  Timeline timeline;
  std::size_t spans_dropped = 0;
};

// Calls body(comm, recorder) on each rank's thread; returns every rank's spans.
LocalRunTimeline run_local_ranks(const LocalRunOptions& options,
                                 const std::function<void(Communicator&, RankRecorder&)>& body);

}  // namespace tandem
