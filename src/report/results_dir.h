// The one writer of a results directory: `--out DIR` of train, characterize and analyze all
// write through it. It owns the directory: it decides what happens to a directory that
// already holds results (one policy, in check_existing), writes every file atomically (a
// reader sees the old file, the new one or none), and writes summary.json as the common
// header (summary_header.h) followed by the command's own body.
//
// Characterize's sweep also commits one configuration at a time (docs/CHARACTERIZE.md):
//   DIR/points/<id>/result.json            written last, atomically: the point is finished
//   DIR/points/<id>/<scenario>.trace.json  its traces
// so a sweep killed at any moment leaves whole points or none, and --resume continues it.
// DIR/settings.json holds the settings the results were measured with (the command line
// that matters, as the command gives it); --resume refuses a directory whose settings
// differ, naming the first setting that does, so that no point of another configuration
// is reused.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "report/summary_header.h"
#include "timeline/chrome_trace.h"

namespace tandem {

class ResultsWriter {
 public:
  // Creates DIR (UsageError naming --out when it cannot be written) and applies the
  // policy for results already in it: characterize refuses them unless `resume` (then the
  // finished points are kept and reported by finished_points()); train and analyze
  // overwrite their files. `argv` is the command line, for the summary's header.
  // `settings` (an object, or null for none): written to settings.json; on `resume` it
  // must equal what the directory holds (a directory without settings.json, from a tandem
  // before it, is taken as it is).
  ResultsWriter(std::filesystem::path dir, ResultsCommand command, std::vector<std::string> argv,
                bool resume = false, const nlohmann::json& settings = nullptr);

  const std::filesystem::path& path() const { return dir_; }
  ResultsCommand command() const { return command_; }

  // DIR/<relative>, atomically; parent directories inside DIR are created.
  void write(const std::filesystem::path& relative, std::string_view content) const;
  // summary.json: the header, then every key of `body` (an object without header keys).
  void write_summary(const nlohmann::json& body) const;
  // A Chrome/Perfetto trace at DIR/<relative> (write_chrome_trace writes it atomically).
  void write_trace(const std::filesystem::path& relative, const Timeline& timeline,
                   const ChromeTraceOptions& options = {}) const;
  // report.html from what the directory holds now (docs/REPORT.md); returns its path.
  std::filesystem::path write_report() const;

  // Characterize: the points whose result.json exists.
  const std::set<std::string>& finished_points() const { return finished_; }
  // Marks a point finished: writes points/<id>/result.json, after its traces.
  void commit_point(const std::string& id, const nlohmann::json& result);
  // Every finished point's result.json, in the given id order (unfinished ids skipped).
  std::vector<nlohmann::json> load_points(const std::vector<std::string>& ids) const;

 private:
  // The one policy for a directory that already holds results.
  void check_existing(bool resume) const;
  // On `resume`, `settings` against settings.json; else (or when there is none) writes them.
  void check_and_write_settings(const nlohmann::json& settings, bool resume) const;
  std::filesystem::path resolve(const std::filesystem::path& relative) const;

  std::filesystem::path dir_;
  ResultsCommand command_;
  std::vector<std::string> argv_;
  std::set<std::string> finished_;
};

}  // namespace tandem
