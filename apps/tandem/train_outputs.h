// What `train` and `simulate` print and write once a run (measured or simulated) is done:
// the summary on stdout and, with --out, steps.csv, summary.json, trace.json and
// report.html, through the same code.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/trainer.h"
#include "power/power.h"
#include "report/results_dir.h"

namespace tandem::cli {

// `summary_extra`: members added to summary.json's body (simulate's "simulated").
int write_train_outputs(const TrainConfig& config, const TrainResult& result, int warmup,
                        const PowerSampler* power, ResultsWriter* out,
                        const nlohmann::json& summary_extra = nlohmann::json::object());

}  // namespace tandem::cli
