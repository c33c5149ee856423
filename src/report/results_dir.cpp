#include "report/results_dir.h"

#include "core/error.h"
#include "core/files.h"
#include "report/html/report.h"

namespace tandem {

namespace fs = std::filesystem;

namespace {

fs::path point_file(const std::string& id) { return fs::path("points") / id / "result.json"; }

}  // namespace

ResultsWriter::ResultsWriter(fs::path dir, ResultsCommand command, std::vector<std::string> argv,
                             bool resume, const nlohmann::json& settings)
    : dir_(std::move(dir)), command_(command), argv_(std::move(argv)) {
  prepare_output_dir(dir_, "--out");
  std::error_code ec;
  if (fs::is_directory(dir_ / "points", ec)) {
    for (const auto& entry : fs::directory_iterator(dir_ / "points", ec)) {
      const std::string id = entry.path().filename().string();
      if (fs::exists(dir_ / point_file(id), ec)) finished_.insert(id);
    }
  }
  check_existing(resume);
  if (!settings.is_null()) check_and_write_settings(settings, resume);
}

namespace {

std::string setting_text(const nlohmann::json& value) {
  if (value.is_null()) return "not given";
  if (value.is_string()) return "'" + value.get<std::string>() + "'";
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void ResultsWriter::check_and_write_settings(const nlohmann::json& settings, bool resume) const {
  TANDEM_CHECK(settings.is_object());
  const fs::path file = dir_ / "settings.json";
  std::error_code ec;
  if (resume && fs::exists(file, ec)) {
    nlohmann::json stored;
    try {
      stored = nlohmann::json::parse(read_file(file));
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(file.string() + ": corrupt settings (" + e.what() + ")");
    }
    if (!stored.is_object()) throw UsageError(file.string() + ": corrupt settings (not an object)");
    // Every key of either side: a flag given only now, or only then, differs too.
    std::set<std::string> keys;
    for (const auto& [key, value] : stored.items()) keys.insert(key);
    for (const auto& [key, value] : settings.items()) keys.insert(key);
    for (const std::string& key : keys) {
      const nlohmann::json then = stored.value(key, nlohmann::json());
      const nlohmann::json now = settings.value(key, nlohmann::json());
      if (then == now) continue;
      throw UsageError("--resume: " + key + " was " + setting_text(then) + " in '" + dir_.string() +
                       "' and is " + setting_text(now) +
                       " now; resume with the same settings, or choose another directory");
    }
    return;
  }
  write("settings.json",
        settings.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
}

void ResultsWriter::check_existing(bool resume) const {
  std::error_code ec;
  const bool holds_results = !finished_.empty() || fs::exists(dir_ / "summary.json", ec);
  switch (command_) {
    case ResultsCommand::kCharacterize:
      if (holds_results && !resume) {
        throw UsageError("--out: '" + dir_.string() +
                         "' already holds results; add --resume to continue it, or choose "
                         "another directory");
      }
      break;
    case ResultsCommand::kTrain:
    case ResultsCommand::kAnalyze:
      break;  // their files are overwritten one by one
  }
}

fs::path ResultsWriter::resolve(const fs::path& relative) const {
  const fs::path path = dir_ / relative;
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) {
    throw UsageError("--out: cannot create '" + path.parent_path().string() + "': " + ec.message());
  }
  return path;
}

void ResultsWriter::write(const fs::path& relative, std::string_view content) const {
  write_file_atomic(resolve(relative), content);
}

void ResultsWriter::write_summary(const nlohmann::json& body) const {
  nlohmann::ordered_json summary = summary_header(command_, argv_);
  for (const auto& [key, value] : body.items()) {
    TANDEM_CHECK(!summary.contains(key) && "a summary body may not redefine a header key");
    summary[key] = value;
  }
  // A name that is not UTF-8 (a kernel's, a path's) is written with U+FFFD, not thrown on.
  write("summary.json",
        summary.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
}

void ResultsWriter::write_trace(const fs::path& relative, const Timeline& timeline,
                                const ChromeTraceOptions& options) const {
  write_chrome_trace(timeline, resolve(relative).string(), options);
}

fs::path ResultsWriter::write_report() const { return html::write_report(dir_); }

void ResultsWriter::commit_point(const std::string& id, const nlohmann::json& result) {
  write(point_file(id), result.dump(1) + "\n");
  finished_.insert(id);
}

std::vector<nlohmann::json> ResultsWriter::load_points(const std::vector<std::string>& ids) const {
  std::vector<nlohmann::json> out;
  for (const auto& id : ids) {
    if (!finished_.count(id)) continue;
    const fs::path file = dir_ / point_file(id);
    try {
      out.push_back(nlohmann::json::parse(read_file(file)));
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(file.string() + ": corrupt result (" + e.what() + ")");
    }
  }
  return out;
}

}  // namespace tandem
