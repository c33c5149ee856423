// The one writer of a results directory: `--out DIR` of train, characterize and analyze all
// write through it. It owns the directory and the one output policy of every command
// (Note [output policy] in results_dir.cpp):
//   - a DIR that already holds something is refused, unless --force (replace it once this
//     run's results are whole) or, for characterize, --resume (continue it);
//   - DIR is locked for the whole run (DIR's parent holds .<name>.lock), so a second run
//     into it is refused with one line;
//   - a fresh run writes into the sibling DIR.partial and renames it to DIR in commit(),
//     so DIR appears whole or not at all; a run that fails removes DIR.partial, except a
//     sweep's finished points, which --resume continues;
//   - every file is written atomically (a reader sees the old file, the new one or none),
//     and summary.json is the common header (summary_header.h) then the command's body.
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

#include <atomic>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/files.h"
#include "core/interrupt.h"
#include "report/summary_header.h"
#include "timeline/chrome_trace.h"

namespace tandem {

// What a command allows to happen to a DIR that already holds something.
struct OutputPolicy {
  bool resume = false;  // characterize --resume: continue DIR (or an interrupted DIR.partial)
  bool force = false;   // --force: replace DIR, once this run's results are whole
  // Characterize: the run's settings (an object), written to settings.json; on resume they
  // must equal what the directory holds. Null: none.
  nlohmann::json settings = nullptr;
};

class ResultsWriter {
 public:
  // Locks DIR and decides where this run writes (Note [output policy]); throws UsageError
  // naming --out (or --resume, --force) when DIR cannot be used. `argv` is the command
  // line, for the summary's header.
  ResultsWriter(std::filesystem::path dir, ResultsCommand command, std::vector<std::string> argv,
                OutputPolicy policy = {});
  // Without commit(): a fresh run's DIR.partial is removed (a sweep's is kept when it holds
  // finished points, for --resume); DIR itself is as it was. Then the lock is released.
  ~ResultsWriter();
  ResultsWriter(const ResultsWriter&) = delete;
  ResultsWriter& operator=(const ResultsWriter&) = delete;

  // DIR, as given: where the results are once committed (for messages).
  const std::filesystem::path& path() const { return dir_; }
  // Where this run writes until commit(): DIR.partial for a fresh run, DIR when resumed in
  // place.
  const std::filesystem::path& working_path() const { return work_; }
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
  // The run is complete: its results become DIR (replacing what --force allowed to be
  // replaced). Throws UsageError naming --out if the rename fails.
  void commit();

  // Characterize: the points whose result.json exists.
  const std::set<std::string>& finished_points() const { return finished_; }
  // Marks a point finished: writes points/<id>/result.json, after its traces.
  void commit_point(const std::string& id, const nlohmann::json& result);
  // Every finished point's result.json, in the given id order (unfinished ids skipped).
  std::vector<nlohmann::json> load_points(const std::vector<std::string>& ids) const;

 private:
  // Decides work_ from what DIR and DIR.partial hold (Note [output policy]).
  void choose_working_directory(const OutputPolicy& policy);
  // On resume, `settings` against settings.json; else (or when there is none) writes them.
  void check_and_write_settings(const nlohmann::json& settings, bool resume) const;
  void load_finished_points();
  std::filesystem::path resolve(const std::filesystem::path& relative) const;

  std::filesystem::path dir_;      // as given
  std::filesystem::path target_;   // DIR, absolute and normalized
  std::filesystem::path partial_;  // DIR.partial
  std::filesystem::path work_;     // target_ or partial_
  ResultsCommand command_;
  std::vector<std::string> argv_;
  std::unique_ptr<FileLock> lock_;
  std::set<std::string> finished_;
  bool committed_ = false;
  // Whether DIR.partial goes if the run ends now, by the destructor or by a signal
  // (core/interrupt.h, which also removes the lock's file): not once committed, nor a
  // sweep's finished points.
  std::atomic<bool> remove_partial_{false};
  std::unique_ptr<InterruptCleanup> interrupt_;
};

}  // namespace tandem
