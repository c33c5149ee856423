// Allreduce on the `mpi` backend against raw MPI_Allreduce and the `local` backend, in
// one run. Run it under mpirun; every process is one rank:
//
//   mpirun -np 2 build/release/bench/mpi_allreduce_bench [--algorithm auto|native|ring]
//          [--min-bytes 1KiB] [--max-bytes 64MiB] [--iters 20] [--warmup 5] [--poll-us 0]
//          [--table classic|nccl] [--link-rate 1Gb/s]
//
// Columns, each the median over iterations of the slowest rank's time (ranks start each
// iteration together after a barrier):
//   raw     MPI_Allreduce(MPI_IN_PLACE, ..., MPI_SUM) called by this thread;
//   raw_nb  MPI_Iallreduce + MPI_Wait called by this thread (what `native` posts);
//   tandem  comm->allreduce(..., kSum)->wait() through tandem's communication thread
//           (issue, queue, post MPI_Iallreduce or the ring, poll, complete the Work);
//   local   the `local` backend with as many threads in one process as there are ranks,
//           run by rank 0 while the other processes sleep.
// overhead = tandem / raw - 1. Bandwidths follow nccl-tests: busbw = S/t * 2(n-1)/n,
// GB/s = 1e9 bytes per second.
//
// --table nccl (for wire sweeps, bench/multihost_busbw.sh) measures only raw and tandem,
// alternating them iteration by iteration (which goes first alternates too), and prints
// two rows per size in nccl-tests' columns (size, count, type, redop, time, algbw =
// S/t, busbw) with the implementation named, plus busbw as a percentage of --link-rate
// when given (a rate as --link takes it: 1Gb/s, 125MB/s).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "comm/local/local_comm.h"
#include "comm/mpi/mpi_comm.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"

namespace tandem {
namespace {

struct Options {
  std::int64_t min_bytes = 1 << 10;
  std::int64_t max_bytes = 64 << 20;
  int iters = 20;
  int warmup = 5;
  std::string algorithm = "auto";
  double poll_us = 0;
  bool nccl_table = false;
  double link_Bps = 0;  // 0: no %link column
};

Options parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--min-bytes") {
      o.min_bytes = parse_bytes(value);
    } else if (flag == "--max-bytes") {
      o.max_bytes = parse_bytes(value);
    } else if (flag == "--iters") {
      o.iters = static_cast<int>(std::max(1LL, parse_int(value, flag)));
    } else if (flag == "--warmup") {
      o.warmup = static_cast<int>(std::max(0LL, parse_int(value, flag)));
    } else if (flag == "--algorithm") {
      o.algorithm = value;
    } else if (flag == "--poll-us") {
      o.poll_us = parse_double(value, flag);
    } else if (flag == "--table") {
      if (value != "classic" && value != "nccl") throw UsageError("--table: classic or nccl");
      o.nccl_table = value == "nccl";
    } else if (flag == "--link-rate") {
      o.link_Bps = parse_bandwidth_Bps(value);
    } else {
      throw UsageError("unknown flag " + flag);
    }
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes) throw UsageError("need 4 <= min <= max bytes");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median over iterations of the slowest rank's time of `op`, in ns. Only this thread
// calls MPI here while the communication thread is idle (MPI_THREAD_MULTIPLE).
template <typename Op>
double time_job(MPI_Comm comm, const Options& o, Op&& op) {
  std::vector<double> times;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    MPI_Barrier(comm);
    const std::int64_t start = now_ns();
    op();
    double mine = static_cast<double>(now_ns() - start), slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    if (it >= o.warmup) times.push_back(slowest);
  }
  return median(times);
}

// Medians, as time_job, of `a` and `b` timed in alternation: one of each per iteration,
// `a` first on even iterations and `b` first on odd ones, so that a noisy minute or a
// warm cache favours neither.
template <typename OpA, typename OpB>
std::pair<double, double> time_pair(MPI_Comm comm, const Options& o, OpA&& a, OpB&& b) {
  std::vector<double> times_a, times_b;
  const auto once = [&](auto& op) {
    MPI_Barrier(comm);
    const std::int64_t start = now_ns();
    op();
    double mine = static_cast<double>(now_ns() - start), slowest = 0;
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    return slowest;
  };
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    double ta = 0, tb = 0;
    if (it % 2 == 0) {
      ta = once(a);
      tb = once(b);
    } else {
      tb = once(b);
      ta = once(a);
    }
    if (it >= o.warmup) {
      times_a.push_back(ta);
      times_b.push_back(tb);
    }
  }
  return {median(times_a), median(times_b)};
}

double local_time_ns(int ranks, std::int64_t bytes, const Options& o) {
  auto comms = make_local_communicators({.ranks = ranks});
  const auto count = static_cast<std::size_t>(bytes) / sizeof(float);
  std::vector<std::vector<float>> buffers(static_cast<std::size_t>(ranks),
                                          std::vector<float>(count, 1.0f));
  std::vector<double> times;
  std::vector<WorkPtr> works(static_cast<std::size_t>(ranks));
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    const std::int64_t start = now_ns();
    for (int r = 0; r < ranks; ++r) works[r] = comms[r]->allreduce(buffers[r], ReduceOp::kSum);
    for (WorkPtr& w : works) w->wait();
    if (it >= o.warmup) times.push_back(static_cast<double>(now_ns() - start));
  }
  return median(times);
}

// --table nccl: MPI_Allreduce and tandem's allreduce, alternated, in nccl-tests' columns.
int run_nccl_table(ProcessCommunicator& comm, MPI_Comm world, const Options& o) {
  const int n = comm.size();
  const bool leader = comm.rank() == 0;
  const double factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  const std::string tandem_name = "tandem:" + o.algorithm;
  if (leader) {
    std::printf("# %d ranks, %s; median of %d iterations (after %d warm-up) of the slowest "
                "rank\n",
                n, comm.describe().c_str(), o.iters, o.warmup);
    std::printf("#%11s %10s %6s %6s %-14s %12s %10s %10s %7s\n", "size", "count", "type", "redop",
                "impl", "time_us", "algbw_GB/s", "busbw_GB/s", "%link");
  }
  std::vector<float> data(static_cast<std::size_t>(o.max_bytes) / sizeof(float), 1.0f);
  for (std::int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    const auto count = static_cast<std::size_t>(bytes) / sizeof(float);
    std::span<float> buffer(data.data(), count);
    const auto [raw, tandem] = time_pair(
        world, o,
        [&] {
          MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                        world);
        },
        [&] { comm.allreduce(buffer, ReduceOp::kSum)->wait(); });
    if (!leader) continue;
    const auto row = [&](const std::string& impl, double t_ns) {
      const double algbw = static_cast<double>(bytes) / t_ns;  // bytes/ns = GB/s
      const double busbw = algbw * factor;
      std::printf("%12lld %10zu %6s %6s %-14s %12.1f %10.4f %10.4f", static_cast<long long>(bytes),
                  count, "float", "sum", impl.c_str(), t_ns / 1e3, algbw, busbw);
      if (o.link_Bps > 0) {
        std::printf(" %6.1f%%", 100 * busbw * 1e9 / o.link_Bps);
      } else {
        std::printf(" %7s", "-");
      }
      std::printf("\n");
    };
    row("MPI_Allreduce", raw);
    row(tandem_name, tandem);
    std::fflush(stdout);
  }
  return 0;
}

int run(const Options& o) {
  auto comm = make_mpi_communicator(
      {.mpi = {.allreduce_algorithm = o.algorithm,
               .poll_sleep_ns = static_cast<std::int64_t>(o.poll_us * 1e3)}});
  MPI_Comm world;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  const int n = comm->size();
  const bool leader = comm->rank() == 0;
  const double factor = n > 1 ? 2.0 * (n - 1) / n : 1.0;
  if (o.nccl_table) {
    const int status = run_nccl_table(*comm, world, o);
    MPI_Comm_free(&world);
    return status;
  }
  if (leader) {
    std::printf("# %d ranks, %s\n", n, comm->describe().c_str());
    std::printf("%12s %10s %10s %10s %9s %10s %11s %11s %11s\n", "bytes", "raw_us", "raw_nb_us",
                "tandem_us", "overhead", "local_us", "raw_busbw", "tandem_bus", "local_bus");
  }
  std::vector<float> data(static_cast<std::size_t>(o.max_bytes) / sizeof(float), 1.0f);
  for (std::int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    const auto count = static_cast<std::size_t>(bytes) / sizeof(float);
    std::span<float> buffer(data.data(), count);
    const double raw = time_job(world, o, [&] {
      MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                    world);
    });
    const double raw_nb = time_job(world, o, [&] {
      MPI_Request request;
      MPI_Iallreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                     world, &request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    });
    const double tandem =
        time_job(world, o, [&] { comm->allreduce(buffer, ReduceOp::kSum)->wait(); });
    double local = 0;
    if (leader) local = local_time_ns(n, bytes, o);
    // The others sleep rather than spin in a barrier while rank 0 measures local; the
    // barrier (non-blocking on every rank: it never matches a blocking one) is the sync.
    MPI_Request request;
    MPI_Ibarrier(world, &request);
    for (int done = 0; !done;) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (leader) {
      const auto bus = [&](double t_ns) { return static_cast<double>(bytes) / t_ns * factor; };
      std::printf("%12lld %10.1f %10.1f %10.1f %8.1f%% %10.1f %11.3f %11.3f %11.3f\n",
                  static_cast<long long>(bytes), raw / 1e3, raw_nb / 1e3, tandem / 1e3,
                  100 * (tandem / raw - 1), local / 1e3, bus(raw), bus(tandem), bus(local));
      std::fflush(stdout);
    }
  }
  MPI_Comm_free(&world);
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  try {
    return tandem::run(tandem::parse_options(argc, argv));
  } catch (const tandem::UsageError& e) {
    std::fprintf(stderr, "mpi_allreduce_bench: %s\n", e.what());
    return 2;
  }
}
