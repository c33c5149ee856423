// libFuzzer target for the trace importer: any bytes must import or throw UsageError,
// and whatever imports must survive the metrics. The fast reader (fast_trace_reader.h)
// must agree with the reference reader on every input it takes: a difference traps.
// Build with clang and -DTANDEM_FUZZ=ON; run e.g.
// `build/fuzz/fuzz/kineto_fuzz -max_total_time=60 fuzz/corpus`.
// (tests/import/fuzz_test.cpp and fast_reader_test.cpp are the bounded, deterministic
// versions that run in CI.)
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "analysis/metrics.h"
#include "core/error.h"
#include "trace_import/fast_trace_reader.h"
#include "trace_import/trace_import.h"
#include "trace_import/trace_reader.h"

namespace {

bool same_events(const tandem::RawTrace& a, const tandem::NameTable& an, const tandem::RawTrace& b,
                 const tandem::NameTable& bn) {
  if (a.events.size() != b.events.size()) return false;
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    const tandem::RawEvent& x = a.events[i];
    const tandem::RawEvent& y = b.events[i];
    if (x.start_ns != y.start_ns || x.end_ns != y.end_ns || x.pid != y.pid || x.tid != y.tid ||
        x.correlation != y.correlation || x.bytes != y.bytes || x.queued_ns != y.queued_ns ||
        x.step != y.step || x.tag != y.tag || x.stream != y.stream || x.device != y.device ||
        x.args != y.args || an.name(x.name) != bn.name(y.name) ||
        a.categories[x.category].name != b.categories[y.category].name) {
      return false;
    }
  }
  return a.launches.size() == b.launches.size() && a.steps.size() == b.steps.size() &&
         a.step_marks.size() == b.step_marks.size() &&
         a.collective_args.size() == b.collective_args.size() &&
         a.collective_ops.size() == b.collective_ops.size() &&
         a.cpu_ops.size() == b.cpu_ops.size() && a.cpu_events == b.cpu_events &&
         a.fractional_ts == b.fractional_ts &&
         a.distributed_rank == b.distributed_rank && a.base_time_ns == b.base_time_ns &&
         a.tandem == b.tandem && a.tandem_t0_ns == b.tandem_t0_ns &&
         a.tandem_ranks == b.tandem_ranks && a.trace_events == b.trace_events &&
         a.names_cut == b.names_cut && a.bytes_read == b.bytes_read;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    tandem::TraceImporter importer;
    importer.add_bytes(text, "fuzz", 0);
    const tandem::ImportResult result = importer.finish();
    (void)tandem::compute_iteration_metrics(result.timeline);
  } catch (const tandem::UsageError&) {
    // The expected outcome for bad input; anything else escapes and is reported.
  }
  tandem::NameTable fast_names, reference_names;
  tandem::TraceBytes fast_bytes(text), reference_bytes(text);
  tandem::RawTrace fast;
  if (tandem::read_raw_trace_fast(fast_bytes, "fuzz", fast_names, fast)) {
    try {
      const tandem::RawTrace reference =
          tandem::read_raw_trace_reference(reference_bytes, "fuzz", reference_names);
      if (!same_events(fast, fast_names, reference, reference_names)) __builtin_trap();
    } catch (const tandem::UsageError&) {
      __builtin_trap();  // the fast reader took what the reference refuses
    }
  }
  return 0;
}
