#include "experiment/sweep.h"

#include "core/error.h"
#include "core/files.h"
#include "core/parse.h"

namespace tandem {

namespace fs = std::filesystem;

SweepAxis parse_sweep(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0) {
    throw UsageError("--sweep: expected KEY=V1,V2,..., got '" + std::string(text) + "'");
  }
  SweepAxis axis{.key = trim(text.substr(0, eq))};
  const std::string padded = " " + std::string(kSweepKeys) + " ";
  if (padded.find(" " + axis.key + " ") == std::string::npos) {
    throw UsageError("--sweep: unknown key '" + axis.key + "' (expected one of: " +
                     std::string(kSweepKeys) + ")");
  }
  const std::string_view list = text.substr(eq + 1);
  const char sep = list.find(';') != std::string_view::npos ? ';' : ',';
  if (trim(list).empty()) throw UsageError("--sweep " + axis.key + ": empty value list");
  for (const std::string& v : split(list, sep)) {
    const std::string value = trim(v);
    if (value.empty()) throw UsageError("--sweep " + axis.key + ": empty value in '" + std::string(list) + "'");
    axis.values.push_back(value);
  }
  return axis;
}

std::vector<SweepPoint> expand_grid(const std::vector<SweepAxis>& axes) {
  std::vector<SweepPoint> points{{}};
  std::set<std::string> seen;
  for (const auto& axis : axes) {
    if (!seen.insert(axis.key).second) throw UsageError("--sweep: key '" + axis.key + "' swept twice");
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

std::string point_id(const SweepPoint& point) {
  if (point.empty()) return "default";
  std::string id;
  for (const auto& [key, value] : point) {
    if (!id.empty()) id += '.';
    id += key + '-';
    for (char c : value) {
      const bool safe = std::isalnum(static_cast<unsigned char>(c)) || c == '-';
      id += safe ? c : '_';
    }
  }
  return id;
}

std::string describe(const SweepPoint& point) {
  if (point.empty()) return "default";
  std::string text;
  for (const auto& [key, value] : point) text += (text.empty() ? "" : " ") + key + "=" + value;
  return text;
}

ResultsDir::ResultsDir(fs::path dir, bool resume) : dir_(std::move(dir)) {
  prepare_output_dir(dir_, "--out");
  std::error_code ec;
  const fs::path points = dir_ / "points";
  if (fs::is_directory(points, ec)) {
    for (const auto& entry : fs::directory_iterator(points, ec)) {
      if (fs::exists(entry.path() / "result.json")) finished_.insert(entry.path().filename().string());
    }
  }
  if (!resume && (!finished_.empty() || fs::exists(dir_ / "summary.json"))) {
    throw UsageError("--out: '" + dir_.string() +
                     "' already holds results; add --resume to continue it, or choose another directory");
  }
}

fs::path ResultsDir::point_dir(const std::string& id) const {
  const fs::path p = dir_ / "points" / id;
  std::error_code ec;
  fs::create_directories(p, ec);
  if (ec) throw UsageError("--out: cannot create '" + p.string() + "': " + ec.message());
  return p;
}

void ResultsDir::commit_point(const std::string& id, const nlohmann::json& result) {
  write_file_atomic(point_dir(id) / "result.json", result.dump(1) + "\n");
  finished_.insert(id);
}

std::vector<nlohmann::json> ResultsDir::load_points(const std::vector<std::string>& ids) const {
  std::vector<nlohmann::json> out;
  for (const auto& id : ids) {
    if (!finished_.count(id)) continue;
    const fs::path file = dir_ / "points" / id / "result.json";
    try {
      out.push_back(nlohmann::json::parse(read_file(file)));
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(file.string() + ": corrupt result (" + e.what() + ")");
    }
  }
  return out;
}

}  // namespace tandem
