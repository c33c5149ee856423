// The timeline's cost per span, measured directly: a ScopedSpan (two clock reads and a
// store into preallocated storage) against the same loop with recording disabled, in
// one run. Multiplied by the spans a training step records, this bounds the timeline's
// share of step time far below what whole-step timings on a noisy machine can resolve.
//
//   timeline_bench [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include "timeline/recorder.h"

namespace tandem {
namespace {

constexpr std::size_t kCapacity = 1 << 20;

void run(benchmark::State& state, bool enabled) {
  RankRecorder recorder(0, kCapacity, enabled);
  std::int32_t step = 0;
  for (auto _ : state) {
    { ScopedSpan span(recorder, Lane::kCompute, SpanKind::kForward, step, 3); }
    // Storage is preallocated: start over before it fills, outside the timed region.
    if (++step % kCapacity == 0) {
      state.PauseTiming();
      recorder.clear();
      state.ResumeTiming();
    }
  }
  benchmark::DoNotOptimize(recorder.lane(Lane::kCompute).size());
}

void BM_ScopedSpanRecorded(benchmark::State& state) { run(state, true); }
void BM_ScopedSpanDisabled(benchmark::State& state) { run(state, false); }
BENCHMARK(BM_ScopedSpanRecorded);
BENCHMARK(BM_ScopedSpanDisabled);

}  // namespace
}  // namespace tandem

BENCHMARK_MAIN();
