// Replay and what-if of profiles (docs/SIMULATE.md, "Replay of PyTorch profiles"): the
// spans `tandem analyze` imports from PyTorch profiler (Kineto) traces, one file per
// rank, as a graph of what waited for what, evaluated again with its times as measured
// (the replay) and with one thing changed (the what-if): the network, contention,
// overlap.
//
// Note [profile graph]
// Every imported span is a node: its queue (GPU stream, or CPU thread), its CPU launch
// where the trace links one (args.correlation), its measured start S and end E. What a
// node's start waited for, its gate G, is the latest of
//   - the end of the work before it on its queue (a stream runs in order),
//   - its launch (the kernel cannot start before the CPU asked for it),
//   - across queues of its rank, a stream waiting for an event another stream recorded
//     (the optimizer's kernels after the gradients' all-reduce, a forward after its
//     parameters' all-gather): where the trace recorded its stream waits (PyTorch's
//     enable_cuda_sync_events: "cuda_sync" events naming the stream and the event
//     record waited on), the waiting stream's first work launched after the wait waits
//     for the recording stream's last work launched before the record, and nothing else
//     on that rank is inferred; else, when the queue and the launch leave it waiting (S
//     later than both), the latest end on another queue in between, if it is within
//     kDependencyWindow of S. A longer gap is the CPU's: kept as measured.
// The rest, S - G, is the node's own latency (a launch's, a wake-up's), kept as
// measured. A collective's members are matched across ranks (analysis/waiting.h, Note
// [skew and transfer]); each member ends at the last member's start plus its transfer,
// E - max S (clamped at 0), so a rank that arrives earlier waits for the others in the
// replay as it did in the trace. Replayed, each node starts at its gate plus its latency,
// gates taken from the replayed ends: with nothing changed that reproduces every span.
// The CPU is not replayed: a launch happens when it was measured, so a what-if that
// speeds the GPU cannot move a CPU-bound rank's launches (a note says how many nodes a
// launch gated).
//
// What-ifs: network=Fx divides every collective's transfer (and an unmatched comm span's
// duration) by F; contention=off gives every compute span that overlapped communication
// on its rank the median duration of the spans of its name that overlapped none (and
// every transfer that overlapped compute the median of its collective's, same kind and
// bytes, that did not), where such spans exist (a compute-only profile, where given,
// before them); overlap=off runs each rank's queues as
// one, in the measured order of their starts, so nothing overlaps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "experiment/replay.h"
#include "trace_import/trace_import.h"

namespace tandem {

// A cross-queue wait is taken from the trace only when the waiting span started within
// this of the other queue's end (GPU stream waits resolve in microseconds).
inline constexpr std::int64_t kDependencyWindow = 50'000;  // ns

struct ProfileGraphStats {
  std::size_t nodes = 0;
  std::size_t queues = 0;
  std::size_t launch_gated = 0;        // nodes whose gate was their launch
  std::size_t cross_queue = 0;     // nodes waiting for another queue's span, read from the timing
  std::size_t explicit_waits = 0;  // nodes waiting for one by a stream wait the trace recorded
  std::size_t collectives = 0;         // matched instances (two or more ranks)
  std::size_t unmatched_comm = 0;      // comm spans in no instance (a peer's trace lacks it)
  std::size_t contention_kept = 0;     // contention=off: overlapped spans with no unoverlapped peer
  std::size_t contention_changed = 0;  // contention=off: spans given an unoverlapped time
};

struct ProfileReplay {
  Timeline replayed;  // the graph with every time as measured: the spans, in the same order
  Timeline what_if;   // the graph with the what-if applied (the replay when none)
  ProfileGraphStats stats;
  std::vector<std::string> notes;  // what the replay assumed
};

// Replays `run` (imported Kineto traces; spans keep their indices, so `run.comm` describes
// both timelines' comm spans too). Throws UsageError naming --from-trace or --what-if for
// what a profile cannot replay (tandem's own traces: replay their results directory; a
// bucket size or a rank count: a profile has no plan to rebuild) and for a graph that
// cannot be ordered (traces whose ranks issued collectives in different orders).
// `baseline`, where given: a compute-only profile of the same job (no communication, as
// `tandem analyze --baseline` takes one); with contention=off its spans' medians by name
// price the overlapped compute spans, before the profile's own unoverlapped peers.
ProfileReplay replay_profile(const ImportResult& run, const WhatIf& what_if,
                             const ImportResult* baseline = nullptr);

}  // namespace tandem
