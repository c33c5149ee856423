// Builds small PyTorch-profiler (Kineto) style traces for tests: the fields the importer
// reads, plus the kind of noise real traces carry (CPU ops, flow events, metadata, args
// with arrays), so tests exercise skipping too. Times are microseconds, as in Kineto.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace tandem::testing {

class KinetoBuilder {
 public:
  explicit KinetoBuilder(std::optional<int> rank = std::nullopt) : rank_(rank) {
    // Metadata and a flow event, as Kineto writes before the spans.
    events_.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", 0}, {"args", {{"name", "python"}}}});
    events_.push_back({{"ph", "s"},
                       {"cat", "ac2g"},
                       {"name", "ac2g"},
                       {"id", 1},
                       {"pid", 1},
                       {"tid", 1},
                       {"ts", 0}});
  }

  // A GPU kernel (cat "kernel") on `stream`; correlation < 0 leaves it out.
  KinetoBuilder& kernel(const std::string& name, double ts, double dur, int stream = 7,
                        long correlation = -1) {
    nlohmann::json args = {{"device", 0},
                           {"stream", stream},
                           {"grid", {1, 2, 3}},
                           {"block", {128, 1, 1}},
                           {"est. achieved occupancy %", 50}};
    if (correlation >= 0) args["correlation"] = correlation;
    events_.push_back({{"ph", "X"},
                       {"cat", "kernel"},
                       {"name", name},
                       {"pid", 0},
                       {"tid", stream},
                       {"ts", ts},
                       {"dur", dur},
                       {"args", args}});
    return *this;
  }
  KinetoBuilder& memcpy(double ts, double dur) {
    events_.push_back({{"ph", "X"},
                       {"cat", "gpu_memcpy"},
                       {"name", "Memcpy HtoD (Pageable -> Device)"},
                       {"pid", 0},
                       {"tid", 7},
                       {"ts", ts},
                       {"dur", dur},
                       {"args", {{"stream", 7}}}});
    return *this;
  }
  // A CPU-side cudaLaunchKernel carrying `correlation`.
  KinetoBuilder& launch(double ts, long correlation) {
    events_.push_back({{"ph", "X"},
                       {"cat", "cuda_runtime"},
                       {"name", "cudaLaunchKernel"},
                       {"pid", 100},
                       {"tid", 100},
                       {"ts", ts},
                       {"dur", 1},
                       {"args", {{"correlation", correlation}, {"cbid", 211}}}});
    return *this;
  }
  KinetoBuilder& profiler_step(int step, double ts, double dur) {
    events_.push_back({{"ph", "X"},
                       {"cat", "user_annotation"},
                       {"name", "ProfilerStep#" + std::to_string(step)},
                       {"pid", 100},
                       {"tid", 100},
                       {"ts", ts},
                       {"dur", dur}});
    return *this;
  }
  KinetoBuilder& cpu_op(const std::string& name, double ts, double dur) {
    events_.push_back({{"ph", "X"},
                       {"cat", "cpu_op"},
                       {"name", name},
                       {"pid", 100},
                       {"tid", 100},
                       {"ts", ts},
                       {"dur", dur},
                       {"args", {{"External id", 3}, {"Input Dims", {{1, 2}, {3}}}}}});
    return *this;
  }
  // Any event, as given.
  KinetoBuilder& event(nlohmann::json e) {
    events_.push_back(std::move(e));
    return *this;
  }
  // An NCCL kernel with the collective arguments PyTorch records (no arguments when
  // `collective` is empty), of the process group named `process_group`.
  KinetoBuilder& nccl(const std::string& name, double ts, double dur, long correlation,
                      const std::string& collective = "", long in = 0, long out = 0, int group = 0,
                      const std::string& dtype = "Float", int device = 0,
                      const std::string& process_group = "0") {
    nlohmann::json args = {{"device", device}, {"stream", 20}, {"correlation", correlation}};
    if (!collective.empty()) {
      args["Collective name"] = collective;
      args["In msg nelems"] = in;
      args["Out msg nelems"] = out;
      args["Group size"] = group;
      args["dtype"] = dtype;
      args["Process Group Name"] = process_group;
    }
    events_.push_back({{"ph", "X"},
                       {"cat", "kernel"},
                       {"name", name},
                       {"pid", device},
                       {"tid", 20},
                       {"ts", ts},
                       {"dur", dur},
                       {"args", args}});
    return *this;
  }
  KinetoBuilder& base_time_ns(long long ns) {
    base_time_ns_ = ns;
    return *this;
  }

  std::string str() const {
    nlohmann::json doc = {{"schemaVersion", 1}, {"deviceProperties", nlohmann::json::array()}};
    if (rank_) doc["distributedInfo"] = {{"backend", "nccl"}, {"rank", *rank_}, {"world_size", 2}};
    doc["traceEvents"] = events_;
    doc["displayTimeUnit"] = "ms";
    if (base_time_ns_) doc["baseTimeNanoseconds"] = *base_time_ns_;
    return doc.dump();
  }

 private:
  std::optional<int> rank_;
  std::optional<long long> base_time_ns_;
  nlohmann::json events_ = nlohmann::json::array();
};

// A small trace with one of everything the reader keeps: the seed the fuzz and the fast
// reader's tests corrupt.
inline std::string seed_kineto_trace() {
  return KinetoBuilder(1)
      .profiler_step(1, 0, 100)
      .launch(5, 1)
      .kernel("ampere_sgemm", 10, 20.5, 7, 1)
      .kernel("ncclDevKernel_AllReduce_Sum_f32", 15, 30, 13)
      .memcpy(40, 2)
      .cpu_op("gloo:all_reduce", 50, 5)
      .base_time_ns(1000)
      .str();
}

}  // namespace tandem::testing
