// Runs the tandem binary as a user would and captures what it printed.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace tandem::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh, empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tandem-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Runs a shell command line with stdin from /dev/null; captures what it printed.
inline CliResult run_shell(const std::string& command) {
  TempDir io;
  const std::string cmd = command + " >" + (io.path() / "out").string() + " 2>" +
                          (io.path() / "err").string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(io.path() / "out");
  r.err = slurp(io.path() / "err");
  return r;
}

// `args` is appended to the binary's path as shell words.
inline CliResult run_tandem(const std::string& args) {
  return run_shell(std::string(TANDEM_BINARY) + " " + args);
}

// Sanitizers reserve terabytes of address space for their shadow memory, so a limit on
// it cannot apply there.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

inline CliResult run_tandem_under_ulimit(std::uint64_t bytes, const std::string& args) {
  return run_shell("ulimit -v " + std::to_string(bytes >> 10) + " && OPENBLAS_NUM_THREADS=1 exec " +
                   TANDEM_BINARY + " " + args);
}

// The address space the binary needs to start and print its version, to 16 MiB: what its
// shared libraries map. A CUDA build maps cuBLAS and NCCL (about 1 GiB of address space,
// little of it resident), a build without CUDA far less, so a limit meant for what a
// command allocates is counted on top of this. Found by bisection, once per test binary.
inline std::uint64_t startup_address_space() {
  static const std::uint64_t bytes = [] {
    std::uint64_t fails = 16ull << 20, runs = 64ull << 30;
    while (runs - fails > (16ull << 20)) {
      const std::uint64_t mid = fails + (runs - fails) / 2;
      (run_tandem_under_ulimit(mid, "--version").exit_code == 0 ? runs : fails) = mid;
    }
    return runs;
  }();
  return bytes;
}

// As run_tandem, with the process's address space limited to `bytes` more than it needs to
// start (RLIMIT_AS, through the shell's ulimit -v), so that a run that would allocate more
// fails instead of passing, whatever the machine's memory. OpenBLAS runs one thread: its
// threads reserve address space in proportion to the machine's cores. Sanitizer builds
// run without the limit.
inline CliResult run_tandem_in_address_space(std::uint64_t bytes, const std::string& args) {
  if (kSanitized) return run_tandem(args);
  return run_tandem_under_ulimit(startup_address_space() + bytes, args);
}

inline int count_lines(const std::string& text) {
  int n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

// How many times `what` occurs in `text` (not overlapping).
inline int count_occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) {
    ++n;
  }
  return n;
}

// The UsageError message of f(), or "" if it did not throw one.
template <typename F>
std::string usage_error(F f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// characterize's progress lines ("[i/n] point: ..."), up to the colon: which points ran.
inline std::vector<std::string> finished_lines(const std::string& out) {
  std::vector<std::string> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("[")) lines.push_back(line.substr(0, line.find(':')));
  }
  return lines;
}

// A powercap root (for --powercap-root) under `dir` with one RAPL package zone whose
// counter stands still: a source that is found and reads 0 J. Returns the root.
inline std::filesystem::path still_rapl_fixture(const std::filesystem::path& dir) {
  const std::filesystem::path zone = dir / "powercap" / "intel-rapl:0";
  std::filesystem::create_directories(zone);
  std::ofstream(zone / "name") << "package-0\n";
  std::ofstream(zone / "energy_uj") << "1000000\n";
  return dir / "powercap";
}

// Starts a shell command line in a child process (its pid); wait_for_exit reaps it. The
// child starts with SIGINT, SIGTERM and SIGHUP at their default actions, whatever this
// process inherited (a test run from a shell's background job ignores SIGINT, and a
// non-interactive sh cannot undo that).
inline pid_t start_shell(const std::string& command) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (int signal : {SIGINT, SIGTERM, SIGHUP}) ::signal(signal, SIG_DFL);
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

// Waits for `pid` (a child of this process) to end, up to `limit`; its wait status, or -1
// if it is still running then.
inline int wait_for_exit(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 || std::chrono::steady_clock::now() > deadline) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a poll, with a deadline
  }
}

// Waits until `path` holds `text`, up to `limit`; the content then.
inline std::string wait_for_text(const std::filesystem::path& path, const std::string& text,
                                 std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    std::string content = slurp(path);
    if (content.find(text) != std::string::npos || std::chrono::steady_clock::now() > deadline) {
      return content;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a poll, with a deadline
  }
}

}  // namespace tandem::testing
