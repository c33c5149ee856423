// Waiting explained: the time a rank is blocked on communication, split into skew (the
// collective could not finish yet because some rank had not arrived at it) and transfer
// (every rank had arrived; data was moving), and which rank kept the others waiting.
//
// Note [skew and transfer]
// A collective cannot complete before its last participant starts it. Spans of one
// collective are matched across ranks by (Span::group, step, kind, name, tag) and their
// order on each rank (the n-th such span on one rank is the n-th on every other); its last
// arrival L is the latest start among them. On each rank the collective's comm span
// [start, end) is then two segments: skew [start, min(end, L)) and transfer
// [max(start, L), end). Point-to-point transfers and collectives only one rank recorded
// have no skew: their whole span is transfer.
//
// The blocked time of a rank is its wait-lane spans (the training thread blocked on a
// collective), or, in a timeline without any (a PyTorch trace, where a GPU collective
// kernel spins until its peers arrive), its comm spans themselves. Each instant of it is
// skew when some collective in flight on that rank is in its skew segment, else transfer
// when one is in its transfer segment, else other (nothing in flight: the rank waited for
// work not yet issued). skew + transfer + other = blocked, exactly, per rank.
//
// Skew is read from the ranks' clocks: exact for the threads of one process, within the
// alignment's uncertainty across processes (the job's clock alignment,
// comm/process_communicator.h), and as the traces give
// them for imported profiles, whose clocks nobody aligned (the caller says which).
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "timeline/recorder.h"

namespace tandem {

// Times are per step: the rank's totals over the measured steps divided by its steps.
struct RankWaiting {
  std::int32_t rank = 0;
  std::int32_t steps = 0;  // measured steps this rank recorded
  double blocked_ns = 0;
  double skew_ns = 0;
  double transfer_ns = 0;
  double other_ns = 0;
  // Collectives (with two or more participants) this rank arrived at last, strictly
  // after every other, and by how much after the next-latest, on average.
  std::int32_t last_arrivals = 0;
  double late_by_ns = 0;
};

struct KindWaiting {
  SpanKind kind = SpanKind::kOther;
  std::int32_t collectives = 0;  // matched instances with two or more participants
  // Per step, mean over ranks: the blocked time each instant of which this kind's
  // collective explained (the first in SpanKind order, where several kinds were in flight).
  double skew_ns = 0;
  double transfer_ns = 0;
  // Mean over its instances of last arrival - first arrival.
  double arrival_spread_ns = 0;
};

struct WaitingAnalysis {
  bool from_wait_spans = true;  // false: blocked time is the comm spans (no wait lane)
  std::int32_t collectives = 0;
  // Per step, mean over ranks.
  double blocked_ns = 0, skew_ns = 0, transfer_ns = 0, other_ns = 0;
  std::vector<RankWaiting> ranks;  // by rank
  std::vector<KindWaiting> kinds;  // by kind, only kinds that occurred
  // The rank with the most last arrivals (-1: none arrived strictly last anywhere).
  std::int32_t most_often_last = -1;
  // How far the ranks' clocks agree, for the skew (clocks_note); the caller knows.
  std::string clocks;

  bool empty() const { return ranks.empty(); }
  const RankWaiting* rank(std::int32_t r) const;
};

// The collective instances of Note [skew and transfer]: the comm spans matched across
// ranks by key and occurrence, each entry the indices into `comm` of one instance's
// members (two or more; spans of one rank only are in none).
std::vector<std::vector<std::size_t>> match_collectives(const std::vector<const Span*>& comm);

// Over the spans with step >= first_step (Note [skew and transfer]).
WaitingAnalysis explain_waiting(const Timeline& timeline, std::int32_t first_step = 0);

// How far the ranks' clocks agree, for the skew: one sentence (an aligned job's clocks
// agree within the alignment's uncertainty; 0 for ranks on one clock).
std::string clocks_note(std::int64_t clock_uncertainty_ns, bool simulated);

// summary.json's "waiting", times in ms; null when nothing was communicated.
nlohmann::json waiting_json(const WaitingAnalysis& waiting);
// The terminal's lines under "blocked waiting", each starting with `indent`; "" when
// nothing was blocked.
std::string format_waiting(const WaitingAnalysis& waiting, const std::string& indent);

}  // namespace tandem
