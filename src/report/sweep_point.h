// One configuration of a sweep and its names: the id that names its folder in a results
// directory (points/<id>/, report/results_dir.h) and the label a report shows. Here, below
// the experiment layer that expands the grid (experiment/sweep.h), because the report
// reads both back from summary.json.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

using SweepPoint = std::vector<std::pair<std::string, std::string>>;  // (key, value) in axis order

// A value as it appears in a point's id: letters, digits and '-' kept, the rest '_'.
std::string point_id_part(std::string_view value);
// A file-name-safe, human-readable id: "strategy-chunked_5.batch-32"; "default" for the
// empty point.
std::string point_id(const SweepPoint& point);
std::string describe(const SweepPoint& point);  // "strategy=chunked:5 batch=32"

}  // namespace tandem
