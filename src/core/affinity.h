// Where the ranks of one process run (docs/ARCHITECTURE.md, "Ranks bound to cores"): each
// in-process rank's threads (its training thread, the BLAS threads it starts, its
// communication threads) bound to cores of its own, as mpirun binds one process per core,
// so that a rank is one device: its communication contends with its own compute, not
// with whichever rank the scheduler puts beside it, and no rank waits for a core while
// another core idles.
#pragma once

#include <span>
#include <string>
#include <thread>
#include <vector>

namespace tandem {

// The CPUs the calling thread may run on, ascending; empty where that cannot be read.
std::vector<int> allowed_cpus();

struct RankCpus {
  std::vector<std::vector<int>> per_rank;  // empty: no rank bound
  std::string description;                 // one line for headers and summary.json
};

// `ranks` ranks of `threads` threads each over `allowed` (allowed_cpus()): rank r on
// allowed[r T .. r T + T), when all of them fit and `bind`; otherwise none bound, and the
// description says why.
RankCpus place_ranks(int ranks, int threads, bool bind, const std::vector<int>& allowed);

// Binds the calling thread to `cpus`; false where the system refused (the thread then
// runs where it did).
bool bind_this_thread(std::span<const int> cpus);
// The same for another, running thread.
bool bind_thread(std::thread& thread, std::span<const int> cpus);

// "0-3,6": a CPU list as Linux writes one.
std::string format_cpu_list(std::span<const int> cpus);

}  // namespace tandem
