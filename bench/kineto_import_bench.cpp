// Throughput and memory of the trace importer behind `tandem analyze`.
//
// Generates a PyTorch-profiler-like trace (CPU ops, cudaLaunchKernel, kernels with
// Kineto's full args, NCCL kernels on a second stream, memcpys, ProfilerStep windows) of
// the requested size, then imports it and computes the metrics, reporting MB/s and the
// process's peak RSS (getrusage). The generator streams to disk, so the peak is the
// importer's.
//
//   kineto_import_bench [MB=1024] [path=/tmp/tandem-kineto-bench.json] [--keep]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "analysis/metrics.h"
#include "trace_import/trace_import.h"
#include "trace_import/trace_reader.h"

namespace {

// Writes events until the file reaches `target_bytes`; returns the number of kernels.
long generate(const std::string& path, std::uint64_t target_bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::perror(path.c_str());
    std::exit(1);
  }
  std::fputs(
      "{\"schemaVersion\": 1, \"deviceProperties\": [], \"distributedInfo\": "
      "{\"backend\": \"nccl\", \"rank\": 0, \"world_size\": 8},\n\"traceEvents\": [\n",
      f);
  long kernels = 0;
  double t = 1.0;  // us
  double gpu = 5.0;
  int step = 0;
  double step_start = t;
  const char* cpu_ops[] = {"aten::linear", "aten::addmm", "aten::relu", "aten::add_"};
  const char* gemm =
      "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
      "(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)";
  const char* nccl =
      "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)";
  while (static_cast<std::uint64_t>(std::ftell(f)) < target_bytes) {
    const long corr = 1000 + kernels;
    std::fprintf(f,
                 "{\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"%s\", \"pid\": 4242, "
                 "\"tid\": 4242, \"ts\": %.3f, \"dur\": 9.250, \"args\": {\"External id\": %ld, "
                 "\"Record function id\": 0, \"Sequence number\": %ld, \"Fwd thread id\": 0, "
                 "\"Ev Idx\": %ld}},\n",
                 cpu_ops[kernels % 4], t, kernels, kernels, kernels);
    std::fprintf(f,
                 "{\"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", "
                 "\"pid\": 4242, \"tid\": 4242, \"ts\": %.3f, \"dur\": 4.125, \"args\": "
                 "{\"External id\": %ld, \"cbid\": 211, \"correlation\": %ld}},\n",
                 t + 2, kernels, corr);
    const bool comm = kernels % 20 == 19;
    const bool copy = kernels % 50 == 7;
    std::fprintf(f,
                 "{\"ph\": \"X\", \"cat\": \"%s\", \"name\": \"%s\", \"pid\": 0, \"tid\": %d, "
                 "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"External id\": %ld, \"queued\": 0, "
                 "\"device\": 0, \"context\": 1, \"stream\": %d, \"correlation\": %ld, "
                 "\"registers per thread\": 232, \"shared memory\": 49152, \"blocks per SM\": "
                 "1.5, \"warps per SM\": 12.0, \"grid\": [108, 2, 1], \"block\": [128, 1, 1], "
                 "\"est. achieved occupancy %%\": 19}},\n",
                 copy ? "gpu_memcpy" : "kernel",
                 copy   ? "Memcpy DtoD (Device -> Device)"
                 : comm ? nccl
                        : gemm,
                 comm ? 13 : 7, gpu, comm ? 40.0 : 11.5, kernels, comm ? 13 : 7, corr);
    std::fputs(
        "{\"ph\": \"s\", \"id\": 1, \"pid\": 4242, \"tid\": 4242, \"ts\": 3.0, "
        "\"cat\": \"ac2g\", \"name\": \"ac2g\"},\n",
        f);
    t += 12.5;
    gpu = std::max(gpu + (comm ? 0.5 : 12.0), t + 3);
    if (++kernels % 1000 == 0) {
      std::fprintf(f,
                   "{\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#%d\", "
                   "\"pid\": 4242, \"tid\": 4242, \"ts\": %.3f, \"dur\": %.3f, \"args\": {}},\n",
                   step++, step_start, t - step_start);
      step_start = t;
    }
  }
  std::fputs(
      "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": 0, \"args\": {\"name\": "
      "\"gpu 0\"}}\n],\n\"displayTimeUnit\": \"ms\", \"baseTimeNanoseconds\": "
      "1700000000000000000}\n",
      f);
  std::fclose(f);
  return kernels;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const double mb = argc > 1 ? std::atof(argv[1]) : 1024;
  const std::string path = argc > 2 ? argv[2] : "/tmp/tandem-kineto-bench.json";
  const bool keep = argc > 3 && std::string(argv[3]) == "--keep";

  if (!std::filesystem::exists(path) || !keep) {
    const long kernels = generate(path, static_cast<std::uint64_t>(mb * 1e6));
    std::printf("generated %s: %.1f MB, %ld GPU events\n", path.c_str(),
                static_cast<double>(std::filesystem::file_size(path)) / 1e6, kernels);
  }
  const double file_mb = static_cast<double>(std::filesystem::file_size(path)) / 1e6;

  // The reader alone (read_raw_trace: the JSON parse and what it keeps), then the whole
  // import (reader and interpretation) and the metrics.
  const auto read_start = std::chrono::steady_clock::now();
  std::uint64_t read_bytes = 0;
  {
    tandem::NameTable names;
    tandem::TraceBytes bytes(path);
    read_bytes = tandem::read_raw_trace(bytes, path, names).bytes_read;
  }
  const double read_s = seconds_since(read_start);

  const auto start = std::chrono::steady_clock::now();
  const tandem::ImportResult imported = tandem::import_traces({path});
  const double import_s = seconds_since(start);
  const auto metrics = tandem::compute_iteration_metrics(imported.timeline);
  const double total_s = seconds_since(start);
  // Throughput in JSON bytes (decompressed for .gz), the work the parser does.
  const double json_mb = static_cast<double>(imported.files[0].bytes) / 1e6;

  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const double peak_mb = static_cast<double>(usage.ru_maxrss) / 1024;  // ru_maxrss is KiB
  std::printf("file %.1f MB, JSON %.1f MB\n", file_mb, json_mb);
  std::printf("read    %8.1f MB in %6.2f s  = %7.1f MB/s  (read_raw_trace)\n",
              static_cast<double>(read_bytes) / 1e6, read_s,
              static_cast<double>(read_bytes) / 1e6 / read_s);
  std::printf("import  %8.1f MB in %6.2f s  = %7.1f MB/s  (%zu spans, %zu trace events)\n", json_mb,
              import_s, json_mb / import_s, imported.timeline.spans.size(),
              imported.files[0].trace_events);
  std::printf("+metrics          %6.2f s  = %7.1f MB/s  (%zu iterations)\n", total_s,
              json_mb / total_s, metrics.size());
  std::printf("peak RSS %.1f MB (%.1f%% of the JSON)\n", peak_mb, 100 * peak_mb / json_mb);
  if (!keep) std::filesystem::remove(path);
  return 0;
}
