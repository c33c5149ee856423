#include "core/affinity.h"

#include <pthread.h>
#include <sched.h>

#include <string>

namespace tandem {

std::vector<int> allowed_cpus() {
  std::vector<int> out;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
#endif
  return out;
}

std::string format_cpu_list(std::span<const int> cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

RankCpus place_ranks(int ranks, int threads, bool bind, const std::vector<int>& allowed) {
  RankCpus out;
  const std::string shape = std::to_string(ranks) + (ranks == 1 ? " rank x " : " ranks x ") +
                            std::to_string(threads) + (threads == 1 ? " thread" : " threads");
  if (!bind) {
    out.description = "not bound (--bind none)";
    return out;
  }
  const long needed = static_cast<long>(ranks) * threads;
  if (allowed.empty() || needed > static_cast<long>(allowed.size())) {
    out.description = "not bound: " + shape + " need " + std::to_string(needed) +
                      " CPUs, this process may use " + std::to_string(allowed.size());
    return out;
  }
  for (int r = 0; r < ranks; ++r) {
    const auto first = allowed.begin() + static_cast<long>(r) * threads;
    out.per_rank.emplace_back(first, first + threads);
  }
  // One line, not a table: the first eight ranks and the last.
  out.description = shape + ", bound:";
  for (int r = 0; r < ranks; ++r) {
    if (r == 8 && ranks > 9) {
      out.description += ", ...";
      r = ranks - 1;
    }
    out.description += std::string(r == 0 ? " " : ", ") + "rank " + std::to_string(r) +
                       (threads == 1 ? " on CPU " : " on CPUs ") +
                       format_cpu_list(out.per_rank[static_cast<std::size_t>(r)]);
  }
  return out;
}

#if defined(__linux__)
namespace {
cpu_set_t cpu_set_of(std::span<const int> cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  }
  return set;
}
}  // namespace
#endif

bool bind_this_thread(std::span<const int> cpus) {
#if defined(__linux__)
  const cpu_set_t set = cpu_set_of(cpus);
  return sched_setaffinity(0, sizeof set, &set) == 0;
#else
  (void)cpus;
  return false;
#endif
}

bool bind_thread(std::thread& thread, std::span<const int> cpus) {
#if defined(__linux__)
  if (!thread.joinable()) return false;
  const cpu_set_t set = cpu_set_of(cpus);
  return pthread_setaffinity_np(thread.native_handle(), sizeof set, &set) == 0;
#else
  (void)thread;
  (void)cpus;
  return false;
#endif
}

}  // namespace tandem
