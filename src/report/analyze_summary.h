// The body of `tandem analyze --out`'s summary.json (ResultsWriter writes the header
// before it): the inputs and the rules that classified them, the summaries over the
// measured iterations, every scenario metric as characterize writes it, and the steps and
// iterations the report draws (docs/ANALYZE.md, "Output").
#pragma once

#include <nlohmann/json.hpp>

#include "trace_import/analyze_report.h"
#include "trace_import/trace_import.h"

namespace tandem {

// `baseline` may be null.
nlohmann::json analyze_summary_body(const AnalyzeResult& result, const ImportResult& run,
                                    const ImportResult* baseline, const ClassificationRules& rules);

}  // namespace tandem
