#include "engine/local_launch.h"

#include <exception>
#include <mutex>
#include <thread>

namespace tandem {

LocalRunTimeline run_local_ranks(const LocalRunOptions& options,
                                 const std::function<void(Communicator&, RankRecorder&)>& body) {
  auto comms = make_local_communicators({.ranks = options.ranks, .link = options.link});
  std::vector<std::unique_ptr<RankRecorder>> recorders;
  for (int r = 0; r < options.ranks; ++r) {
    recorders.push_back(
        std::make_unique<RankRecorder>(r, options.span_capacity_per_lane, options.record));
    comms[r]->set_recorder(recorders[r].get());
  }

  std::exception_ptr first_error;
  std::mutex error_mutex;
  std::vector<std::thread> threads;
  for (int r = 0; r < options.ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(*comms[r], *recorders[r]);
      } catch (...) {
        {
          std::lock_guard lock(error_mutex);
          if (!first_error) first_error = std::current_exception();
        }
        // Destroying a communicator aborts its world: peers stop waiting for this rank.
        comms[r].reset();
      }
    });
  }
  for (auto& t : threads) t.join();
  // Communication threads end here; after this every span buffer is quiescent.
  comms.clear();
  if (first_error) std::rethrow_exception(first_error);

  LocalRunTimeline out;
  out.timeline.ranks = options.ranks;
  for (const auto& recorder : recorders) {
    auto spans = recorder->collect();
    out.timeline.spans.insert(out.timeline.spans.end(), spans.begin(), spans.end());
    out.spans_dropped += recorder->dropped();
  }
  return out;
}

}  // namespace tandem
