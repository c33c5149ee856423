// Sweeps: a grid of configurations from repeatable --sweep KEY=V1,V2,... flags, a stable
// id per point, and a results directory where each finished point is one atomically
// written file, so a sweep killed midway resumes with exactly the points not done.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tandem {

inline constexpr std::string_view kSweepKeys =
    "strategy bucket-mb chunks batch model ranks link threads";

struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
};

// "KEY=V1,V2,..."; values are separated by ';' instead when any ';' is present (for
// values that contain commas: link=10GB/s,5us;25GB/s,5us). Throws UsageError naming
// --sweep for an unknown key, an empty list or an empty value.
SweepAxis parse_sweep(std::string_view text);

using SweepPoint = std::vector<std::pair<std::string, std::string>>;  // (key, value) in axis order

// The cartesian product, first axis slowest; a single empty point when there are no axes.
// Throws UsageError if a key is swept twice.
std::vector<SweepPoint> expand_grid(const std::vector<SweepAxis>& axes);

// A file-name-safe, human-readable id: "strategy-chunked_5.batch-32"; "default" for the
// empty point.
std::string point_id(const SweepPoint& point);
std::string describe(const SweepPoint& point);  // "strategy=chunked:5 batch=32"

// The results directory of `tandem characterize --out DIR`.
//   DIR/points/<id>/result.json         one finished point (written last, atomically)
//   DIR/points/<id>/<scenario>.trace.json
//   DIR/summary.json, DIR/iterations.csv, DIR/trace.json   rebuilt after every point
class ResultsDir {
 public:
  // Creates DIR. Without `resume`, DIR must not hold results already; with it, the
  // points found finished are reported by finished(). Throws UsageError naming --out.
  ResultsDir(std::filesystem::path dir, bool resume);

  const std::filesystem::path& path() const { return dir_; }
  std::filesystem::path point_dir(const std::string& id) const;
  const std::set<std::string>& finished() const { return finished_; }
  // Marks a point finished: writes its result.json atomically.
  void commit_point(const std::string& id, const nlohmann::json& result);
  // Every finished point's result.json, in the given id order (unknown ids skipped).
  std::vector<nlohmann::json> load_points(const std::vector<std::string>& ids) const;

 private:
  std::filesystem::path dir_;
  std::set<std::string> finished_;
};

}  // namespace tandem
