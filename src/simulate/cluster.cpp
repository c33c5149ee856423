// Clusters: the built-in datasheet profiles, the NODESxDEVICESxPROFILE form, JSON files.
#include "simulate/cluster.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/parse.h"

namespace tandem {

double DeviceProfile::peak(Precision precision) const {
  return peak_flops[static_cast<std::size_t>(precision)];
}

// Note [a GEMM's weights]
// A product of an [M, K] input by [K, N] weights does 2 M K N FLOPs and reads K N weights.
// With many rows (M) the reads hide behind the arithmetic; with few, the arithmetic waits
// on them. Priced as a sum (FLOPs at the GEMM rate plus the weights at the memory
// bandwidth), every forward pass of a well-fed layer came 10-16% long on the Zen 4 VM (the
// reads counted on top of a product that hid them), while a batch of 8 came 34% short;
// priced as a max (a roofline), the middle misses: 32 rows of a 1024-wide layer ran at 80
// GFLOP/s, 64 rows at 100, 128 at 108, where a max gives the peak to all three. Their
// quadrature, sqrt((F / R)^2 + (W / BWw)^2), bends between the two: BWw is the rate a
// product reads its weights at (DeviceProfile::weight_rate; fitted, 7.8-8.7 GB/s there:
// the library's kernels for few rows do not stream at the memory's bandwidth; on a
// datasheet device its memory bandwidth). The weights' products are a forward pass's and the input
// gradient's in backward (the weight gradient's write the gradient: read and written, at
// the memory bandwidth with the pass's other bytes). The quadrature is homogeneous, so a
// pass cut into pieces with shares of its FLOPs and weights sums to the pass. Over three
// sets of runs there, the calibration's median error on its passes fell from 19-20% to
// 11-12%, on the held-out runs' GEMM passes from 8% to 7% (docs/SIMULATE.md).
double pass_seconds(const PassRates& rates, double flops, double bytes, double weight_flops,
                    double weight_bytes) {
  return std::hypot(weight_flops * rates.flop_s, weight_bytes * rates.weight_byte_s) +
         (flops - weight_flops) * rates.flop_s + bytes * rates.byte_s;
}

bool sharded_collective(SpanKind kind) {
  return kind == SpanKind::kReduceScatter || kind == SpanKind::kAllgather;
}

double DeviceProfile::compute_slowdown(SpanKind kind) const {
  return sharded_collective(kind) ? sharded_compute_slowdown.value_or(overlap_compute_slowdown)
                                  : overlap_compute_slowdown;
}

double DeviceProfile::comm_slowdown(SpanKind kind) const {
  return sharded_collective(kind) ? sharded_comm_slowdown.value_or(overlap_comm_slowdown)
                                  : overlap_comm_slowdown;
}

namespace {

constexpr double kT = 1e12, kG = 1e9;

struct Builtin {
  DeviceProfile device;
  LinkProfile intra;
  LinkProfile inter;
  int nics_per_node;
};

// Note [datasheet profiles]: peak dense FLOP/s (fp32, tf32, fp16, bf16), memory bandwidth
// and capacity from the vendors' public datasheets (SXM/OAM parts; NVIDIA A100, H100 and
// H200 datasheets, AMD Instinct MI210 and MI250 product briefs). AMD's fp32 is the matrix
// (MFMA) rate, what rocBLAS GEMMs use; AMD parts have no tf32 (0). Link bandwidth is per
// direction per device (NVLink 3: 600 GB/s both ways; NVLink 4: 900; Infinity Fabric: the
// study's 300). The per-message latencies, the network (8 NICs of 200 Gb/s HDR per A100
// node, 400 Gb/s NDR per H100/H200 node, 200 Gb/s assumed for AMD nodes), the GEMM
// efficiency and the overlap slowdowns are not datasheet figures: they are uncalibrated
// starting points (the slowdowns from ISPASS 2025's reported ranges per part), which
// `tandem simulate --calibrate` replaces with fitted ones.
std::vector<Builtin> builtins() {
  auto device = [](std::string name, double fp32, double tf32, double half, double mem_bw,
                   double mem, double compute_slow, std::string source) {
    DeviceProfile d;
    d.name = std::move(name);
    d.peak_flops = {fp32, tf32, half, half};
    d.memory_bytes_per_s = mem_bw;
    d.memory_bytes = mem;
    d.overlap_compute_slowdown = compute_slow;
    d.overlap_comm_slowdown = 0.05;
    d.source = std::move(source);
    return d;
  };
  return {
      {device("a100-40gb", 19.5 * kT, 156 * kT, 312 * kT, 1555 * kG, 40 * kG, 0.04,
              "NVIDIA A100 datasheet (SXM4 40GB), dense"),
       {300 * kG, 2e-6},
       {25 * kG, 5e-6},
       8},
      {device("h100-80gb", 67 * kT, 494.7 * kT, 989.4 * kT, 3350 * kG, 80 * kG, 0.05,
              "NVIDIA H100 datasheet (SXM5 80GB), dense"),
       {450 * kG, 2e-6},
       {50 * kG, 5e-6},
       8},
      {device("h200", 67 * kT, 494.7 * kT, 989.4 * kT, 4800 * kG, 141 * kG, 0.05,
              "NVIDIA H200 datasheet (SXM 141GB), dense"),
       {450 * kG, 2e-6},
       {50 * kG, 5e-6},
       8},
      {device("mi210", 45.3 * kT, 0, 181 * kT, 1638 * kG, 64 * kG, 0.11,
              "AMD Instinct MI210 product brief, matrix fp32, dense"),
       {150 * kG, 3e-6},
       {25 * kG, 5e-6},
       4},
      {device("mi250", 90.5 * kT, 0, 362.1 * kT, 3277 * kG, 128 * kG, 0.2,
              "AMD Instinct MI250 (OAM) product brief, matrix fp32, dense"),
       {150 * kG, 3e-6},
       {25 * kG, 5e-6},
       4},
  };
}

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// "h100" finds "h100-80gb": a unique prefix of a built-in name.
const Builtin* find_builtin(const std::vector<Builtin>& all, std::string_view name) {
  const std::string key = lower(name);
  const Builtin* found = nullptr;
  for (const Builtin& b : all) {
    if (b.device.name == key) return &b;
    if (b.device.name.starts_with(key)) {
      if (found != nullptr) return nullptr;  // ambiguous
      found = &b;
    }
  }
  return found;
}

Cluster from_builtin(const Builtin& b, int nodes, int per_node, std::string name) {
  Cluster c;
  c.name = std::move(name);
  c.nodes = nodes;
  c.devices_per_node = per_node;
  c.device = b.device;
  c.intra = b.intra;
  c.inter = b.inter;
  c.nics_per_node = b.nics_per_node;
  return c;
}

[[noreturn]] void bad(std::string_view text, const std::string& why) {
  throw UsageError("--cluster " + std::string(text) + ": " + why);
}

int count_of(std::string_view text, std::string_view part, const char* what) {
  try {
    const auto n = parse_int(part, what);
    if (n < 1 || n > 1'000'000) bad(text, std::string(what) + " must be 1..1000000");
    return static_cast<int>(n);
  } catch (const UsageError&) {
    bad(text, std::string(what) + " '" + std::string(part) + "' is not a count");
  }
}

double positive(const nlohmann::json& j, const char* key, double scale, std::string_view file) {
  const auto& v = j.at(key);
  if (!v.is_number() || v.get<double>() < 0) {
    throw UsageError("--cluster " + std::string(file) + ": \"" + key +
                     "\" must be a non-negative number");
  }
  return v.get<double>() * scale;
}

Cluster from_json(std::string_view path) {
  std::ifstream in{std::string(path)};
  if (!in) throw UsageError("--cluster " + std::string(path) + ": cannot read the file");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("--cluster " + std::string(path) + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("device") || !j["device"].is_object()) {
    throw UsageError("--cluster " + std::string(path) +
                     ": expected an object with \"device\" (docs/SIMULATE.md)");
  }
  const auto all = builtins();
  const nlohmann::json& d = j["device"];
  Cluster c;
  if (d.contains("profile")) {
    const Builtin* b =
        d["profile"].is_string() ? find_builtin(all, d["profile"].get<std::string>()) : nullptr;
    if (b == nullptr) {
      throw UsageError("--cluster " + std::string(path) + ": \"profile\" must be one of " +
                       builtin_profiles());
    }
    c = from_builtin(*b, 1, 1, "");
  } else if (!d.contains("peak_tflops")) {
    throw UsageError("--cluster " + std::string(path) +
                     ": the device needs \"profile\" or \"peak_tflops\"");
  }
  c.name = std::string(path);
  try {
    if (j.contains("nodes"))
      c.nodes = count_of(path, std::to_string(j["nodes"].get<long>()), "nodes");
    if (j.contains("devices_per_node")) {
      c.devices_per_node =
          count_of(path, std::to_string(j["devices_per_node"].get<long>()), "devices_per_node");
    }
    if (j.contains("nics_per_node")) {
      c.nics_per_node =
          count_of(path, std::to_string(j["nics_per_node"].get<long>()), "nics_per_node");
    }
    if (d.contains("name")) c.device.name = d["name"].get<std::string>();
    if (c.device.name.empty()) c.device.name = "device";
    if (d.contains("peak_tflops")) {
      const nlohmann::json& p = d["peak_tflops"];
      const char* names[] = {"fp32", "tf32", "fp16", "bf16"};
      for (std::size_t i = 0; i < 4; ++i) {
        if (p.contains(names[i])) c.device.peak_flops[i] = positive(p, names[i], kT, path);
      }
    }
    if (d.contains("memory_gbps"))
      c.device.memory_bytes_per_s = positive(d, "memory_gbps", kG, path);
    if (d.contains("memory_gb")) c.device.memory_bytes = positive(d, "memory_gb", kG, path);
    if (d.contains("gemm_weights_gbps")) {
      c.device.weight_bytes_per_s = positive(d, "gemm_weights_gbps", kG, path);
    }
    if (d.contains("gemm_efficiency"))
      c.device.gemm_efficiency = positive(d, "gemm_efficiency", 1, path);
    if (d.contains("overlap_compute_slowdown")) {
      c.device.overlap_compute_slowdown = positive(d, "overlap_compute_slowdown", 1, path);
    }
    if (d.contains("overlap_comm_slowdown")) {
      c.device.overlap_comm_slowdown = positive(d, "overlap_comm_slowdown", 1, path);
    }
    if (d.contains("sharded_compute_slowdown")) {
      c.device.sharded_compute_slowdown = positive(d, "sharded_compute_slowdown", 1, path);
    }
    if (d.contains("sharded_comm_slowdown")) {
      c.device.sharded_comm_slowdown = positive(d, "sharded_comm_slowdown", 1, path);
    }
    if (d.contains("first_touch_gbps")) {
      c.device.first_touch_bytes_per_s = positive(d, "first_touch_gbps", kG, path);
    }
    if (d.contains("give_back_us")) c.device.give_back_s = positive(d, "give_back_us", 1e-6, path);
    if (d.contains("compute_jitter")) {
      c.device.compute_jitter = positive(d, "compute_jitter", 1, path);
    }
    if (d.contains("compute_jitter_ms")) {
      c.device.compute_jitter_s = positive(d, "compute_jitter_ms", 1e-3, path);
    }
    if (d.contains("issuer_held")) c.device.issuer_held = positive(d, "issuer_held", 1, path);
    for (auto [key, link] : {std::pair{"intra", &c.intra}, std::pair{"inter", &c.inter}}) {
      if (!j.contains(key)) continue;
      const nlohmann::json& l = j[key];
      if (l.contains("gbps")) link->bandwidth_bytes_per_s = positive(l, "gbps", kG, path);
      if (l.contains("latency_us")) link->latency_s = positive(l, "latency_us", 1e-6, path);
      if (l.contains("overhead_us")) link->overhead_s = positive(l, "overhead_us", 1e-6, path);
    }
    c.device.source = d.contains("source") ? d["source"].get<std::string>() : c.device.source;
  } catch (const nlohmann::json::exception& e) {
    throw UsageError("--cluster " + std::string(path) + ": " + e.what());
  }
  if (c.device.peak(Precision::kFp32) <= 0 || c.device.memory_bytes_per_s <= 0 ||
      c.intra.bandwidth_bytes_per_s <= 0 || (c.nodes > 1 && c.inter.bandwidth_bytes_per_s <= 0)) {
    throw UsageError("--cluster " + std::string(path) +
                     ": needs fp32 peak, memory_gbps, intra gbps (and inter gbps for several "
                     "nodes) above 0");
  }
  if (c.device.gemm_efficiency <= 0 || c.device.gemm_efficiency > 1) {
    throw UsageError("--cluster " + std::string(path) + ": gemm_efficiency must be in (0, 1]");
  }
  if (c.device.compute_jitter >= 1) {
    throw UsageError("--cluster " + std::string(path) + ": compute_jitter must be in [0, 1)");
  }
  if (c.device.issuer_held > 1) {
    throw UsageError("--cluster " + std::string(path) + ": issuer_held must be in [0, 1]");
  }
  return c;
}

}  // namespace

std::string builtin_profiles() {
  std::string out;
  for (const Builtin& b : builtins()) out += (out.empty() ? "" : ", ") + b.device.name;
  return out;
}

Cluster parse_cluster(std::string_view text) {
  if (text.empty()) throw UsageError("--cluster: empty");
  if (text.ends_with(".json") || std::filesystem::exists(std::string(text))) {
    return from_json(text);
  }
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t x = text.find('x', start);
    // A profile's own name may hold an 'x' (none does today): split only leading counts.
    if (x == std::string_view::npos || !std::isdigit(static_cast<unsigned char>(text[start]))) {
      parts.push_back(text.substr(start));
      break;
    }
    parts.push_back(text.substr(start, x - start));
    start = x + 1;
  }
  if (parts.size() > 3) bad(text, "expected NODESxDEVICESxPROFILE, DEVICESxPROFILE or PROFILE");
  const auto all = builtins();
  const Builtin* b = find_builtin(all, parts.back());
  if (b == nullptr) {
    bad(text, "no device profile '" + std::string(parts.back()) +
                  "' (built in: " + builtin_profiles() + "; or a JSON file)");
  }
  const int nodes = parts.size() == 3 ? count_of(text, parts[0], "nodes") : 1;
  const int per_node =
      parts.size() >= 2 ? count_of(text, parts[parts.size() - 2], "devices per node") : 1;
  return from_builtin(*b, nodes, per_node, std::string(text));
}

DegradedLink DegradedLink::parse(std::string_view text) {
  const auto kv = parse_key_values(text, "--degraded-link", "node intra network");
  if (!kv.count("node") || (!kv.count("intra") && !kv.count("network"))) {
    throw UsageError("--degraded-link " + std::string(text) +
                     ": expected node=N and intra=F and/or network=F (fractions like 0.5x)");
  }
  DegradedLink d;
  d.node = static_cast<int>(parse_int_in(kv.at("node"), "--degraded-link node", 0, 1'000'000));
  for (auto [key, field] : {std::pair{"intra", &d.intra}, std::pair{"network", &d.network}}) {
    if (!kv.count(key)) continue;
    // A fraction of the link's bandwidth.
    *field = parse_factor(kv.at(key), "--degraded-link " + std::string(key),
                          {.min = 0, .max = 1, .min_open = true});
  }
  return d;
}

double Cluster::intra_factor(int node) const {
  double f = 1;
  for (const DegradedLink& d : degraded) {
    if (d.node == node) f = std::min(f, d.intra);
  }
  return f;
}

double Cluster::network_factor(int node) const {
  double f = 1;
  for (const DegradedLink& d : degraded) {
    if (d.node == node) f = std::min(f, d.network);
  }
  return f;
}

std::string Cluster::describe() const {
  char line[256];
  std::snprintf(line, sizeof line, "%d x %d %s (links %.0f GB/s", nodes, devices_per_node,
                device.name.c_str(), intra.bandwidth_bytes_per_s / kG);
  std::string out = line;
  if (nodes > 1) {
    std::snprintf(line, sizeof line, ", network %d x %.0f GB/s per node", nics_per_node,
                  inter.bandwidth_bytes_per_s / kG);
    out += line;
  }
  out += ")";
  for (const DegradedLink& d : degraded) {
    std::snprintf(line, sizeof line, ", node %d's links at %.0f%% / network %.0f%%", d.node,
                  100 * d.intra, 100 * d.network);
    out += line;
  }
  return out;
}

}  // namespace tandem
