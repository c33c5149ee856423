// Allreduce throughput of the `local` backend against the memory-traffic bound.
//
// An allreduce of S bytes on n ranks sharing memory must read each rank's buffer once
// and write it once; the copy bandwidth of two threads (measured in the same run)
// bounds that traffic, so the fastest possible time is t = n*S / B_copy2 and the
// bound's busbw is (S/t) * 2(n-1)/n. Bandwidths follow nccl-tests: algbw = S/t,
// busbw = algbw * 2(n-1)/n, GB/s = 1e9 bytes per second.
//
// The machine may be shared and noisy, so the 2-thread copy bandwidth behind each row's
// bound is measured again right before that row, and printed with it.
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

// Aggregate copy bandwidth (bytes copied per second, summed over threads) of up to two
// threads, each copying its own buffer at the same time; median of several rounds. The
// buffers are allocated and touched once, so no measurement pays for first-touch page
// faults. The workers release each other (the launching thread only joins), so none
// waits for a core that a spinning launcher holds.
class CopyMeter {
 public:
  explicit CopyMeter(std::size_t bytes_per_thread)
      : bytes_(bytes_per_thread),
        src_(kMaxThreads, std::vector<char>(bytes_per_thread, 1)),
        dst_(kMaxThreads, std::vector<char>(bytes_per_thread, 0)) {}

  std::size_t bytes_per_thread() const { return bytes_; }

  double GBps(int threads) {
    std::vector<double> rates;
    for (int round = 0; round < 5; ++round) {
      std::atomic<int> arrived{0};
      std::vector<std::int64_t> start(threads), end(threads);
      std::vector<std::thread> workers;
      for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
          arrived.fetch_add(1);
          while (arrived.load() < threads) {
          }
          start[t] = now_ns();
          std::memcpy(dst_[t].data(), src_[t].data(), bytes_);
          end[t] = now_ns();
        });
      }
      for (std::thread& w : workers) w.join();
      const std::int64_t first = *std::min_element(start.begin(), start.end());
      const std::int64_t last = *std::max_element(end.begin(), end.end());
      rates.push_back(static_cast<double>(bytes_) * threads / static_cast<double>(last - first));
    }
    return median(rates);  // bytes per ns = GB/s
  }

 private:
  static constexpr int kMaxThreads = 2;
  std::size_t bytes_;
  std::vector<std::vector<char>> src_, dst_;
};

struct Row {
  int ranks;
  std::int64_t bytes;
  double time_us, algbw, busbw, bound_busbw, copy2_GBps;
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
  return Row{n, bytes, t_ns / 1e3, algbw, algbw * factor, bound_busbw, copy2_GBps};
}

int run(const Options& options) {
  CopyMeter copy_meter(std::size_t{128} << 20);  // 4x the largest last-level caches here
  const double copy1 = copy_meter.GBps(1);
  const double copy2 = copy_meter.GBps(2);
  if (options.csv) {
    std::printf(
        "ranks,bytes,time_us,algbw_GBps,busbw_GBps,bound_busbw_GBps,busbw_over_bound,"
        "copy2_GBps,start_copy1_GBps,start_copy2_GBps\n");
  } else {
    std::printf(
        "# memcpy bandwidth at start (%s per thread): 1 thread %.2f GB/s, "
        "2 threads %.2f GB/s\n",
        format_bytes(static_cast<double>(copy_meter.bytes_per_thread())).c_str(), copy1, copy2);
    std::printf(
        "# bound: each rank's buffer read once and written once at the 2-thread copy\n"
        "# rate copy2, measured again right before each row\n");
    std::printf("%5s %12s %12s %11s %11s %11s %12s %11s\n", "ranks", "bytes", "time_us",
                "algbw_GB/s", "busbw_GB/s", "bound_GB/s", "busbw/bound", "copy2_GB/s");
  }
  for (int ranks : options.ranks) {
    auto comms = make_local_communicators(LocalOptions{.ranks = ranks});
    std::vector<std::vector<float>> buffers(
        static_cast<std::size_t>(ranks),
        std::vector<float>(static_cast<std::size_t>(options.max_bytes) / sizeof(float), 1.0f));
    for (std::int64_t bytes = options.min_bytes; bytes <= options.max_bytes; bytes *= 4) {
      const Row row = measure(comms, buffers, bytes, options, copy_meter.GBps(2));
      const double ratio = row.busbw / row.bound_busbw;
      if (options.csv) {
        std::printf("%d,%lld,%.3f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f\n", row.ranks,
                    static_cast<long long>(row.bytes), row.time_us, row.algbw, row.busbw,
                    row.bound_busbw, ratio, row.copy2_GBps, copy1, copy2);
      } else {
        std::printf("%5d %12lld %12.2f %11.3f %11.3f %11.3f %12.3f %11.2f\n", row.ranks,
                    static_cast<long long>(row.bytes), row.time_us, row.algbw, row.busbw,
                    row.bound_busbw, ratio, row.copy2_GBps);
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
