// Shared helpers for the import tests: import a trace from text, pick out one iteration.
#pragma once

#include <gtest/gtest.h>

#include <random>
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

// A corrupted copy of `seed`: 1-4 edits among byte flips, JSON-significant bytes,
// truncations, duplicated and erased ranges (the fuzz tests' mutator).
inline std::string mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string s = seed;
  static constexpr char kSignificant[] = "{}[]\":,.-0123456789eE\\ \x00\xff";
  const auto pick = [&](std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
  };
  const int edits = 1 + static_cast<int>(pick(4));
  for (int e = 0; e < edits && !s.empty(); ++e) {
    switch (pick(5)) {
      case 0:
        s[pick(s.size())] = static_cast<char>(pick(256));
        break;
      case 1:
        s[pick(s.size())] = kSignificant[pick(sizeof kSignificant - 1)];
        break;
      case 2:
        s.resize(pick(s.size()));
        break;
      case 3: {
        const std::size_t at = pick(s.size());
        s.insert(at, s.substr(pick(s.size()), pick(64)));
        break;
      }
      default:
        s.erase(pick(s.size()), pick(16));
        break;
    }
  }
  return s;
}


}  // namespace tandem::testing
