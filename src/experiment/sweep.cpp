#include "experiment/sweep.h"

#include <map>
#include <set>

#include "core/error.h"
#include "core/parse.h"

namespace tandem {

SweepAxis parse_sweep(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    throw UsageError("--sweep: expected KEY=V1,V2,..., got '" + std::string(text) + "'");
  }
  SweepAxis axis{.key = trim(text.substr(0, eq))};
  const std::string padded = " " + std::string(kSweepKeys) + " ";
  if (padded.find(" " + axis.key + " ") == std::string::npos) {
    throw UsageError("--sweep: unknown key '" + axis.key +
                     "' (expected one of: " + std::string(kSweepKeys) + ")");
  }
  const std::string_view list = text.substr(eq + 1);
  const char sep = list.find(';') != std::string_view::npos ? ';' : ',';
  if (trim(list).empty()) throw UsageError("--sweep " + axis.key + ": empty value list");
  for (const std::string& v : split(list, sep)) {
    const std::string value = trim(v);
    if (value.empty())
      throw UsageError("--sweep " + axis.key + ": empty value in '" + std::string(list) + "'");
    axis.values.push_back(value);
  }
  // A value given twice would measure one point twice; two values that differ only in
  // characters a file name cannot hold ("10GB/s" and "10GB_s") would share a directory.
  std::map<std::string, std::string> by_id;
  for (const std::string& value : axis.values) {
    const auto [at, fresh] = by_id.emplace(point_id_part(value), value);
    if (fresh) continue;
    if (at->second == value) {
      throw UsageError("--sweep " + axis.key + ": value '" + value + "' given twice");
    }
    throw UsageError("--sweep " + axis.key + ": values '" + at->second + "' and '" + value +
                     "' would share the point id '" + at->first + "'");
  }
  return axis;
}

std::vector<SweepPoint> expand_grid(const std::vector<SweepAxis>& axes) {
  std::vector<SweepPoint> points{{}};
  std::set<std::string> seen;
  for (const auto& axis : axes) {
    if (!seen.insert(axis.key).second)
      throw UsageError("--sweep: key '" + axis.key + "' swept twice");
    std::vector<SweepPoint> next;
    for (const auto& point : points) {
      for (const auto& value : axis.values) {
        SweepPoint p = point;
        p.emplace_back(axis.key, value);
        next.push_back(std::move(p));
      }
    }
    points = std::move(next);
  }
  return points;
}

}  // namespace tandem
