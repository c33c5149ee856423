// Allreduce throughput of the `local` backend against the memory-traffic bound.
//
// An allreduce of S bytes on n ranks sharing memory must read each rank's buffer once
// and write it once; the copy bandwidth of two threads (measured in the same run)
// bounds that traffic, so the fastest possible time is t = n*S / B_copy2 and the
// bound's busbw is (S/t) * 2(n-1)/n. Bandwidths follow nccl-tests: algbw = S/t,
// busbw = algbw * 2(n-1)/n, GB/s = 1e9 bytes per second.
//
//   allreduce_bench [--min-bytes 1KiB] [--max-bytes 256MiB] [--ranks 2,4] [--iters 20]
//                   [--warmup 5] [--csv]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "comm/local/local_comm.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/parse.h"

namespace tandem {
namespace {

struct Options {
  std::int64_t min_bytes = 1 << 10;
  std::int64_t max_bytes = 256 << 20;
  std::vector<int> ranks = {2, 4};
  int iters = 20;
  int warmup = 5;
  bool csv = false;
};

constexpr const char* kUsage =
    "usage: allreduce_bench [--min-bytes 1KiB] [--max-bytes 256MiB] [--ranks 2,4]\n"
    "                       [--iters 20] [--warmup 5] [--csv]\n";

Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--csv") {
      options.csv = true;
      continue;
    }
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) throw UsageError(flag + ": missing value\n" + kUsage);
    const std::string value = argv[++i];
    try {
      if (flag == "--min-bytes") {
        options.min_bytes = parse_bytes(value);
      } else if (flag == "--max-bytes") {
        options.max_bytes = parse_bytes(value);
      } else if (flag == "--ranks") {
        options.ranks.clear();
        for (const std::string& r : split(value, ',')) {
          const long long ranks = parse_int(trim(r), "rank count");
          if (ranks < 1 || ranks > 64) throw UsageError("rank count must be in [1, 64]");
          options.ranks.push_back(static_cast<int>(ranks));
        }
      } else if (flag == "--iters") {
        options.iters = static_cast<int>(std::max(1LL, parse_int(value, "iteration count")));
      } else if (flag == "--warmup") {
        options.warmup = static_cast<int>(std::max(0LL, parse_int(value, "warm-up count")));
      } else {
        throw UsageError("unknown flag\n" + std::string(kUsage));
      }
    } catch (const UsageError& e) {
      throw UsageError(flag + ": " + e.what());
    }
  }
  if (options.min_bytes < 4 || options.max_bytes < options.min_bytes) {
    throw UsageError("need 4 <= --min-bytes <= --max-bytes");
  }
  return options;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

// Aggregate copy bandwidth (bytes copied per second, summed over threads) of `threads`
// threads each copying its own buffer, released together; median of several rounds.
double memcpy_GBps(int threads, std::size_t bytes_per_thread) {
  std::vector<std::vector<char>> src(threads), dst(threads);
  for (int t = 0; t < threads; ++t) {
    src[t].assign(bytes_per_thread, static_cast<char>(t + 1));  // touch every page
    dst[t].assign(bytes_per_thread, 0);
  }
  std::vector<double> rates;
  for (int round = 0; round < 7; ++round) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> workers;
    std::vector<std::int64_t> end(threads);
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        ready.fetch_add(1);
        while (!go.load(std::memory_order_acquire)) {
        }
        std::memcpy(dst[t].data(), src[t].data(), bytes_per_thread);
        end[t] = now_ns();
      });
    }
    while (ready.load() < threads) {
    }
    const std::int64_t start = now_ns();
    go.store(true, std::memory_order_release);
    for (std::thread& w : workers) w.join();
    const std::int64_t last = *std::max_element(end.begin(), end.end());
    rates.push_back(static_cast<double>(bytes_per_thread) * threads / (last - start));
  }
  return median(rates);  // bytes per ns = GB/s
}

struct Row {
  int ranks;
  std::int64_t bytes;
  double time_us, algbw, busbw, bound_busbw;
};

Row measure(std::vector<std::unique_ptr<Communicator>>& comms,
            std::vector<std::vector<float>>& buffers, std::int64_t bytes, const Options& options,
            double copy2_GBps) {
  const int n = static_cast<int>(comms.size());
  const auto count = static_cast<std::size_t>(bytes) / sizeof(float);
  std::vector<double> times_ns;
  std::vector<WorkPtr> works(static_cast<std::size_t>(n));
  for (int it = 0; it < options.warmup + options.iters; ++it) {
    // Sums of normal numbers never produce denormals, so the values do not affect speed.
    const std::int64_t start = now_ns();
    for (int r = 0; r < n; ++r) {
      works[r] = comms[r]->allreduce(std::span<float>(buffers[r].data(), count), ReduceOp::kSum);
    }
    for (WorkPtr& w : works) w->wait();
    if (it >= options.warmup) times_ns.push_back(static_cast<double>(now_ns() - start));
  }
  const double t_ns = median(times_ns);
  const double algbw = static_cast<double>(bytes) / t_ns;  // GB/s
  const double factor = 2.0 * (n - 1) / n;
  // Bound: n buffers of `bytes` read once and written once at the 2-thread copy rate.
  const double bound_t_ns = static_cast<double>(n) * static_cast<double>(bytes) / copy2_GBps;
  const double bound_busbw = static_cast<double>(bytes) / bound_t_ns * factor;
  return Row{n, bytes, t_ns / 1e3, algbw, algbw * factor, bound_busbw};
}

int run(const Options& options) {
  constexpr std::size_t kCopyBytes = std::size_t{256} << 20;
  const double copy1 = memcpy_GBps(1, kCopyBytes);
  const double copy2 = memcpy_GBps(2, kCopyBytes);
  if (options.csv) {
    std::printf("ranks,bytes,time_us,algbw_GBps,busbw_GBps,bound_busbw_GBps,busbw_over_bound,"
                "copy1_GBps,copy2_GBps\n");
  } else {
    std::printf("# memcpy bandwidth (%s per thread): 1 thread %.2f GB/s, 2 threads %.2f GB/s\n",
                format_bytes(static_cast<double>(kCopyBytes)).c_str(), copy1, copy2);
    std::printf("# bound: each rank's buffer read once and written once at the 2-thread rate\n");
    std::printf("%5s %12s %12s %11s %11s %11s %12s\n", "ranks", "bytes", "time_us", "algbw_GB/s",
                "busbw_GB/s", "bound_GB/s", "busbw/bound");
  }
  for (int ranks : options.ranks) {
    auto comms = make_local_communicators(LocalOptions{.ranks = ranks});
    std::vector<std::vector<float>> buffers(
        static_cast<std::size_t>(ranks),
        std::vector<float>(static_cast<std::size_t>(options.max_bytes) / sizeof(float), 1.0f));
    for (std::int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
      const Row row = measure(comms, buffers, bytes, options, copy2);
      const double ratio = row.busbw / row.bound_busbw;
      if (options.csv) {
        std::printf("%d,%lld,%.3f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", row.ranks,
                    static_cast<long long>(row.bytes), row.time_us, row.algbw, row.busbw,
                    row.bound_busbw, ratio, copy1, copy2);
      } else {
        std::printf("%5d %12lld %12.2f %11.3f %11.3f %11.3f %12.3f\n", row.ranks,
                    static_cast<long long>(row.bytes), row.time_us, row.algbw, row.busbw,
                    row.bound_busbw, ratio);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  try {
    return tandem::run(tandem::parse_options(argc, argv));
  } catch (const tandem::UsageError& e) {
    std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
    return 2;
  }
}
