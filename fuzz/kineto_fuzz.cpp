// libFuzzer target for the trace importer: any bytes must import or throw UsageError,
// and whatever imports must survive the metrics. Build with clang and -DTANDEM_FUZZ=ON;
// run e.g. `build/fuzz/fuzz/kineto_fuzz -max_total_time=60 fuzz/corpus`.
// (tests/import/fuzz_test.cpp is the bounded, deterministic version that runs in CI.)
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "analysis/metrics.h"
#include "core/error.h"
#include "trace_import/trace_import.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    tandem::TraceImporter importer;
    importer.add_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz", 0);
    const tandem::ImportResult result = importer.finish();
    (void)tandem::compute_iteration_metrics(result.timeline);
  } catch (const tandem::UsageError&) {
    // The expected outcome for bad input; anything else escapes and is reported.
  }
  return 0;
}
