#include "report/results_dir.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "core/files.h"
#include "report/html/report.h"

namespace tandem {

namespace fs = std::filesystem;

namespace {

// Commands whose finished points outlive a failure and continue with --resume: a
// characterize sweep's configurations, a tune's measurements.
bool resumable(ResultsCommand command) {
  return command == ResultsCommand::kCharacterize || command == ResultsCommand::kTune;
}

// A killed run's half-written files: AtomicFile's temporaries ("NAME.tmp.PID"). Called
// on a resume while the directory's lock is held, so no live run is writing them.
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (is_atomic_file_temporary(it->path()) && it->is_regular_file(ec)) {
      stale.push_back(it->path());
    }
  }
  for (const fs::path& p : stale) fs::remove(p, ec);
}

fs::path point_file(const std::string& id) { return fs::path("points") / id / "result.json"; }

}  // namespace

ResultsWriter::ResultsWriter(fs::path dir, ResultsCommand command, std::vector<std::string> argv,
                             OutputPolicy policy)
    : dir_(std::move(dir)), command_(command), argv_(std::move(argv)) {
  std::error_code ec;
  fs::path absolute = fs::absolute(dir_, ec).lexically_normal();
  if (!absolute.has_filename()) absolute = absolute.parent_path();  // "run/"
  if (ec || !absolute.has_filename() || absolute == absolute.root_path()) {
    throw UsageError("--out: '" + dir_.string() + "' cannot be a results directory");
  }
  // A DIR that is a symbolic link: the results go where it points.
  target_ = fs::weakly_canonical(absolute, ec);
  if (ec) target_ = absolute;
  const fs::path parent = target_.parent_path();
  fs::create_directories(parent, ec);
  if (ec || !fs::is_directory(parent)) {
    throw UsageError("--out: cannot create directory '" + parent.string() +
                     "': " + (ec ? ec.message() : "not a directory"));
  }
  partial_ = parent / (target_.filename().string() + ".partial");
  const fs::path lock_path = parent / ("." + target_.filename().string() + ".lock");
  lock_ = std::make_unique<FileLock>(lock_path, "--out: '" + dir_.string() + "'");
  choose_working_directory(policy);
  load_finished_points();
  // A sweep's finished points outlive a failure: --resume continues them.
  remove_partial_ = work_ == partial_ && !(resumable(command_) && !finished_.empty());
  interrupt_ = std::make_unique<InterruptCleanup>([this, partial = partial_, lock_path] {
    std::error_code ignored;
    if (remove_partial_) fs::remove_all(partial, ignored);
    fs::remove(lock_path, ignored);  // the kernel drops the flock itself as the process ends
  });
  if (!policy.settings.is_null()) check_and_write_settings(policy.settings, policy.resume);
}

ResultsWriter::~ResultsWriter() {
  interrupt_.reset();
  if (remove_partial_) {
    std::error_code ec;
    fs::remove_all(partial_, ec);
  }
  lock_.reset();
}

namespace {

// Whether `dir` holds something a tandem command writes: --force replaces only that, never
// a directory of other files named by mistake.
bool holds_tandem_results(const fs::path& dir) {
  std::error_code ec;
  for (const char* name : {"summary.json", "settings.json", "points", "steps.csv", "iterations.csv",
                           "trace.json", "report.html"}) {
    if (fs::exists(dir / name, ec)) return true;
  }
  return false;
}

std::size_t finished_in(const fs::path& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir / "points", ec)) {
    n += fs::exists(entry.path() / "result.json", ec);
  }
  return n;
}

}  // namespace

// Note [output policy]: the one policy of every command that writes --out DIR, decided
// while DIR's lock is held, so no other run changes DIR or DIR.partial meanwhile.
//   --resume, DIR holds results:    continue in place (each point commits atomically)
//   --resume, DIR.partial exists:   continue the interrupted first run there
//   DIR holds something, no --force: refused (characterize suggests --resume)
//   DIR.partial with finished points (characterize), no --force: refused, suggesting
//                                   --resume, so a killed sweep is not thrown away
//   otherwise:                      a fresh, empty DIR.partial; commit() renames it to DIR
// DIR is replaced (with --force) only in commit(): a --force run that fails leaves the
// old results as they were.
void ResultsWriter::choose_working_directory(const OutputPolicy& policy) {
  const std::string out = "--out: '" + dir_.string() + "'";
  if (policy.resume && policy.force) {
    throw UsageError("--resume and --force: choose one (continue " + dir_.string() +
                     ", or replace it)");
  }
  std::error_code ec;
  const bool exists = fs::exists(target_, ec);
  if (exists && !fs::is_directory(target_, ec)) throw UsageError(out + " is not a directory");
  const bool holds = exists && !fs::is_empty(target_, ec);
  const bool partial = fs::exists(partial_, ec);
  if (policy.resume && resumable(command_)) {
    if (holds || partial) {
      work_ = holds ? target_ : partial_;
      remove_stale_temporaries(work_);
      return;
    }
  }
  if (holds && !policy.force) {
    throw UsageError(out + (resumable(command_)
                                ? " already holds results; add --resume to continue it, --force "
                                  "to replace it, or choose another directory"
                                : " already holds results; add --force to replace them, or "
                                  "choose another directory"));
  }
  if (holds && !holds_tandem_results(target_)) {
    throw UsageError(out +
                     " holds files that are not tandem results; --force replaces only "
                     "a results directory: choose another");
  }
  if (partial) {
    const std::size_t finished = finished_in(partial_);
    if (resumable(command_) && finished > 0 && !policy.force) {
      throw UsageError("--out: an interrupted run left '" + partial_.string() + "' with " +
                       std::to_string(finished) +
                       " finished point(s); add --resume to continue it, or --force to start "
                       "over");
    }
    fs::remove_all(partial_, ec);  // nothing worth keeping; no run writes it (the lock)
  }
  fs::create_directory(partial_, ec);
  if (ec) {
    throw UsageError("--out: cannot create '" + partial_.string() + "': " + ec.message());
  }
  work_ = partial_;
}

void ResultsWriter::load_finished_points() {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(work_ / "points", ec)) {
    const std::string id = entry.path().filename().string();
    if (fs::exists(work_ / point_file(id), ec)) finished_.insert(id);
  }
}

void ResultsWriter::commit() {
  if (committed_) return;
  if (work_ != partial_) {
    committed_ = true;
    return;
  }
  const auto fail = [&](int error) {
    throw UsageError("--out: cannot rename '" + partial_.string() + "' to '" + target_.string() +
                     "': " + std::strerror(error));
  };
  std::error_code ec;
  // rename(2) replaces an empty directory; one with results (--force) is swapped with the
  // new one in a single step, so DIR always holds one whole set of results.
  if (!fs::exists(target_, ec) || fs::is_empty(target_, ec)) {
    if (::rename(partial_.c_str(), target_.c_str()) != 0) fail(errno);
  } else if (::renameat2(AT_FDCWD, partial_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) ==
             0) {
    fs::remove_all(partial_, ec);  // now the old results
  } else {
    // A file system without the exchange: move the old aside, then the new in.
    const fs::path old = target_.parent_path() /
                         ("." + target_.filename().string() + ".old." + std::to_string(::getpid()));
    if (::rename(target_.c_str(), old.c_str()) != 0) fail(errno);
    if (::rename(partial_.c_str(), target_.c_str()) != 0) {
      const int error = errno;
      ::rename(old.c_str(), target_.c_str());
      fail(error);
    }
    fs::remove_all(old, ec);
  }
  committed_ = true;
  remove_partial_ = false;
  work_ = target_;
}

namespace {

std::string setting_text(const nlohmann::json& value) {
  if (value.is_null()) return "not given";
  if (value.is_string()) return "'" + value.get<std::string>() + "'";
  // A flag without a value, as the command line records it.
  if (value == nlohmann::json::array({"true"})) return "given";
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void ResultsWriter::check_and_write_settings(const nlohmann::json& settings, bool resume) const {
  TANDEM_CHECK(settings.is_object());
  const fs::path file = work_ / "settings.json";
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

fs::path ResultsWriter::resolve(const fs::path& relative) const {
  const fs::path path = work_ / relative;
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

fs::path ResultsWriter::write_report() const {
  // Named DIR, not DIR.partial: `tandem report DIR` rebuilds the same page.
  return html::write_report(work_,
                            {.point = {}, .iteration = {}, .max_ranks = 8, .shown_as = dir_});
}

void ResultsWriter::commit_point(const std::string& id, const nlohmann::json& result) {
  write(point_file(id), result.dump(1) + "\n");
  finished_.insert(id);
  if (resumable(command_)) remove_partial_ = false;
}

std::vector<nlohmann::json> ResultsWriter::load_points(const std::vector<std::string>& ids) const {
  std::vector<nlohmann::json> out;
  for (const auto& id : ids) {
    if (!finished_.count(id)) continue;
    const fs::path file = work_ / point_file(id);
    try {
      out.push_back(nlohmann::json::parse(read_file(file)));
    } catch (const nlohmann::json::exception& e) {
      throw UsageError(file.string() + ": corrupt result (" + e.what() + ")");
    }
  }
  return out;
}

}  // namespace tandem
