// What a result was measured on: CPU model, cores, memory, kernel, BLAS, compiler and
// the date, for every summary and report.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace tandem {

nlohmann::json machine_json();
std::string utc_timestamp();  // "2026-11-22T06:10:00Z"

}  // namespace tandem
