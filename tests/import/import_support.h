// Shared helpers for the import tests: import a trace from text, pick out one iteration.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "analysis/metrics.h"
#include "core/error.h"
#include "trace_import/trace_import.h"

namespace tandem::testing {

inline ImportResult import_text(const std::string& text, const ClassificationRules& rules = {},
                                const std::string& source = "trace.json") {
  TraceImporter importer(rules);
  importer.add_bytes(text, source, 0);
  return importer.finish();
}

// The metrics of (rank, step); fails the test if absent.
inline IterationMetrics iteration(const Timeline& timeline, int rank, int step) {
  for (const IterationMetrics& m : compute_iteration_metrics(timeline)) {
    if (m.rank == rank && m.step == step) return m;
  }
  ADD_FAILURE() << "no iteration rank " << rank << " step " << step;
  return {};
}

constexpr std::int64_t us(std::int64_t v) { return v * 1000; }

}  // namespace tandem::testing
