// The pipeline bubble (docs/METRICS.md, "Pipeline bubble"): per stage and step, the share
// of the pipeline's pass window in which the stage did not compute.
//
// For step k of a pipeline (the P consecutive ranks of one replica, engine/pipeline.h):
//   window_k   = [earliest forward or backward span start, latest end] over its P ranks
//   busy_{r,k} = length of the union of rank r's forward and backward spans in step k
//   bubble_{r,k} = 1 - busy_{r,k} / window_k
// With equal stages and no transfer time this is the textbook (P-1)/(M+P-1) for gpipe and
// 1f1b and (P-1)/(V·M+P-1) for interleaved:V. The optimizer, the tied-embedding exchange
// and the waits after the last backward are outside the window.
#pragma once

#include <vector>

#include "timeline/recorder.h"

namespace tandem {

struct StageBubble {
  int rank = 0;
  int step = 0;
  double window_ns = 0;
  double busy_ns = 0;

  double bubble() const { return window_ns > 0 ? 1.0 - busy_ns / window_ns : 0.0; }
};

// One row per rank and step that has passes, sorted by (step, rank); `stages` consecutive
// ranks form a pipeline (1: every rank on its own, a bubble of its idle time between
// passes).
std::vector<StageBubble> pipeline_bubbles(const Timeline& timeline, int stages);

}  // namespace tandem
