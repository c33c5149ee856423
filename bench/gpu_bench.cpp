// GPU reference numbers for scripts/gpu-check: cuBLAS GEMM throughput per precision, the
// emulated ring all-reduce's bandwidth for a few ring sizes, and cudaMemcpy device-to-
// device bandwidth as the HBM baseline the emulation is compared with.
//
// Usage: gpu_bench [--gemm-n N] [--bytes SIZE] [--iters K]
// Prints one table per measurement and, last, "RESULT <key> <value> <unit>" lines that
// scripts/gpu-check collects into its summary.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/backend_registry.h"
#include "cuda/resources.h"
#include "compute/cuda/gemm.h"
#include "core/error.h"
#include "core/parse.h"

namespace tandem {
namespace {

struct Args {
  int gemm_n = 8192;
  std::int64_t bytes = 1ll << 30;
  int iters = 20;
};

std::vector<std::string> g_results;
void result(const std::string& key, double value, const char* unit) {
  char line[256];
  std::snprintf(line, sizeof line, "RESULT %s %.3f %s", key.c_str(), value, unit);
  g_results.emplace_back(line);
}

// Milliseconds per call of `body` on `stream`, median of `iters` after 3 warm-ups.
template <typename F>
double time_ms(cudaStream_t stream, int iters, F&& body) {
  cuda::Event start(cuda::Event::Timing::kOn), stop(cuda::Event::Timing::kOn);
  for (int i = 0; i < 3; ++i) body();
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    TANDEM_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    body();
    TANDEM_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float t = 0;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&t, start.get(), stop.get()));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void bench_gemm(const Args& args) {
  const int n = args.gemm_n;
  const auto elems = static_cast<std::size_t>(n) * n;
  cuda::Stream stream;
  cuda::CublasHandle blas;
  blas.set_stream(stream.get());
  cuda::DeviceBuffer<float> a(elems), b(elems), c(elems);  // fp32 holds any input type
  // Small nonzero values (0x3c00 halves are 1.0 in fp16; as fp32 bits, tiny numbers).
  TANDEM_CUDA_CHECK(cudaMemsetAsync(a.data(), 0x3c, a.bytes(), stream.get()));
  TANDEM_CUDA_CHECK(cudaMemsetAsync(b.data(), 0x3c, b.bytes(), stream.get()));
  std::printf("\nGEMM %d x %d x %d (%s), median of %d\n", n, n, n,
              cuda::cublas_description().c_str(), args.iters);
  std::printf("  %-6s %12s %12s\n", "prec", "ms", "TFLOP/s");
  for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kFp16, Precision::kBf16}) {
    const double ms = time_ms(stream.get(), args.iters, [&] {
      cuda::gemm(blas, p, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    });
    const double tflops = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
    std::printf("  %-6s %12.3f %12.1f\n", std::string(to_string(p)).c_str(), ms, tflops);
    result("gemm_" + std::string(to_string(p)) + "_tflops", tflops, "TFLOP/s");
  }
}

void bench_memory(const Args& args) {
  const auto count = static_cast<std::size_t>(args.bytes / 4);
  cuda::Stream stream;
  cuda::DeviceBuffer<float> src(count), dst(count);
  TANDEM_CUDA_CHECK(cudaMemsetAsync(src.data(), 0, src.bytes(), stream.get()));
  const double copy_ms = time_ms(stream.get(), args.iters, [&] {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.bytes(), cudaMemcpyDeviceToDevice,
                                      stream.get()));
  });
  // A copy reads and writes every byte: HBM traffic is twice the size.
  const double copy_hbm = 2.0 * static_cast<double>(src.bytes()) / (copy_ms * 1e-3) / 1e9;
  std::printf(
      "\ncudaMemcpy device-to-device of %s: %.3f ms, %.1f GB/s copied, %.1f GB/s HBM "
      "(read + write)\n",
      format_bytes(static_cast<double>(src.bytes())).c_str(), copy_ms,
      static_cast<double>(src.bytes()) / (copy_ms * 1e-3) / 1e9, copy_hbm);
  result("memcpy_d2d_hbm_GBps", copy_hbm, "GB/s");

  // The emulated ring (docs/GPU.md "Emulated ring"): bytes each step moves in HBM:
  // reduce-scatter steps 2 reads + 1 write of the chunk plus the neighbour's message
  // (1 read + 1 write), allgather steps 1 read + 1 write plus the message; one extra
  // message before the first step.
  std::printf("\nemulated ring all-reduce of %s (fp32, average), median of %d\n",
              format_bytes(static_cast<double>(src.bytes())).c_str(), args.iters);
  std::printf("  %5s %7s %10s %10s %10s %12s %10s\n", "peers", "blocks", "ms", "algbw", "busbw",
              "HBM GB/s", "vs memcpy");
  for (int peers : {2, 4, 8}) {
    for (int blocks : {0, 32}) {
      auto comms = require_backend("emulated", "--device-comm")
                       .make_world({.ranks = 1, .device = {.emulated_peers = peers, .emulated_blocks = blocks}});
      Communicator& comm = *comms.at(0);
      // Enqueued back to back on a bound stream that waits for each (Work::wait), as a
      // trainer's compute stream would: the host does not wait in between.
      cuda::Stream bound;
      comm.bind_stream(bound.get());
      WorkPtr last;
      const double ms = time_ms(bound.get(), args.iters, [&] {
        last = comm.allreduce(std::span<float>(src.data(), count), ReduceOp::kAverage);
        last->wait();
      });
      last->synchronize();
      const double s = static_cast<double>(src.bytes());
      const double algbw = s / (ms * 1e-3) / 1e9;
      const double busbw = algbw * 2.0 * (peers - 1) / peers;
      const double hbm_bytes = ((peers - 1) * 9.0 + 2.0) * s / peers;
      const double hbm = hbm_bytes / (ms * 1e-3) / 1e9;
      std::printf("  %5d %7s %10.3f %10.1f %10.1f %12.1f %9.0f%%\n", peers,
                  blocks == 0 ? "16" : std::to_string(blocks).c_str(), ms, algbw, busbw, hbm,
                  100 * hbm / copy_hbm);
      if (blocks == 0) {
        result("emulated_p" + std::to_string(peers) + "_busbw_GBps", busbw, "GB/s");
        result("emulated_p" + std::to_string(peers) + "_hbm_vs_memcpy_pct", 100 * hbm / copy_hbm,
               "%");
      }
    }
  }
}

int run(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw UsageError(flag + ": missing value");
    const std::string value = argv[++i];
    if (flag == "--gemm-n") {
      args.gemm_n = static_cast<int>(parse_int(value, "--gemm-n"));
    } else if (flag == "--bytes") {
      args.bytes = parse_bytes(value);
    } else if (flag == "--iters") {
      args.iters = static_cast<int>(parse_int(value, "--iters"));
    } else {
      throw UsageError("unknown flag " + flag + " (expected --gemm-n, --bytes, --iters)");
    }
  }
  if (args.gemm_n < 1 || args.bytes < 4 || args.iters < 1)
    throw UsageError("sizes must be positive");
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    throw UsageError("no CUDA device");
  }
  cudaDeviceProp prop{};
  TANDEM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("gpu_bench on %s (%d SMs, %s)\n", prop.name, prop.multiProcessorCount,
              format_bytes(static_cast<double>(prop.totalGlobalMem)).c_str());
  bench_gemm(args);
  bench_memory(args);
  std::printf("\n");
  for (const auto& line : g_results) std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  try {
    return tandem::run(argc, argv);
  } catch (const tandem::UsageError& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_bench: %s\n", e.what());
    return 1;
  }
}
