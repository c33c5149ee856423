#include "sweep_progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <utility>

namespace tandem::cli {

namespace {

std::string one_line_result(const Characterization& c) {
  char buf[200];
  const auto& m = c.metrics;
  std::snprintf(buf, sizeof buf,
                "E2E ovl %.2f ms, seq %.2f ms, ideal %.2f ms; slowdown %.1f%%, overlap ratio "
                "%.1f%%, hidden comm %.1f%%",
                m.e2e_ovl_ns.median / 1e6, m.e2e_seq_ns.median / 1e6, m.e2e_ideal_ns.median / 1e6,
                100 * m.compute_slowdown.median, 100 * m.overlap_ratio.median,
                100 * m.hidden_share.median);
  return buf;
}

}  // namespace

TerminalProgress::TerminalProgress(std::string out, bool enabled)
    : out_(std::move(out)), tty_(enabled && ::isatty(1)) {}

void TerminalProgress::sweep_started(std::size_t total, std::size_t finished) {
  total_ = total;
  if (finished > 0) {
    std::printf("resuming %s: %zu of %zu configurations already done\n", out_.c_str(), finished,
                total);
    std::fflush(stdout);
  }
}

void TerminalProgress::scenario_started(std::size_t index, const SweepPoint& point,
                                        Scenario scenario) {
  if (!tty_) return;
  const int width = 24;
  const int filled = static_cast<int>(width * index / std::max<std::size_t>(1, total_));
  std::printf("\r\033[K[%s%s] %zu/%zu %s: %s", std::string(filled, '#').c_str(),
              std::string(width - filled, '.').c_str(), index, total_, describe(point).c_str(),
              std::string(to_string(scenario)).c_str());
  std::fflush(stdout);
}

void TerminalProgress::point_finished(std::size_t index, const SweepPoint& point,
                                      const Characterization& c) {
  if (tty_) std::printf("\r\033[K");
  std::printf("[%zu/%zu] %s: %s\n", index + 1, total_, describe(point).c_str(),
              one_line_result(c).c_str());
  std::fflush(stdout);
}

}  // namespace tandem::cli
