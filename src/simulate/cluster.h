// The machines a simulation runs on (docs/SIMULATE.md): nodes of identical devices, the
// links inside a node and the network between nodes, and how much compute and
// communication slow each other when they overlap on a device.
//
// A cluster is given as NODESxDEVICESxPROFILE ("8x8xH100": 8 nodes of 8 H100s),
// DEVICESxPROFILE (one node), or a JSON file (docs/SIMULATE.md has the schema). The
// built-in profiles (a100-40gb, h100-80gb, h200, mi210, mi250) are public datasheet
// figures, dense (no sparsity); their `source` says so.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compute/precision.h"
#include "timeline/span.h"

namespace tandem {

struct LinkProfile {
  double bandwidth_bytes_per_s = 0;  // per direction, per device
  double latency_s = 0;              // per message (alpha)
  // Per collective waited for in place (a tensor group's), once: the hand-off around its
  // transfer (the post reaching whoever moves the data, the waiter waking when it is
  // done). Calibration fits it from such collectives; 0 for the datasheet profiles.
  double overhead_s = 0;
};

// What one device computes and holds.
struct DeviceProfile {
  std::string name;
  // Peak dense FLOP/s by Precision (fp32, tf32, fp16, bf16); 0: not supported.
  std::array<double, 4> peak_flops{};
  double memory_bytes_per_s = 0;  // memory bandwidth
  double memory_bytes = 0;        // capacity
  // The rate a GEMM reads the weights it multiplies by while it computes, the two in
  // quadrature (Note [a GEMM's weights] in cluster.cpp): a product of few rows is bound
  // by its weights, one of many by its arithmetic. 0: the memory bandwidth (every datasheet
  // profile); calibration fits it.
  double weight_bytes_per_s = 0;
  // The fraction of peak a training GEMM reaches (calibration fits it; docs/SIMULATE.md).
  double gemm_efficiency = 0.6;
  // While a collective runs beside compute on the same device: compute takes this much
  // longer (0.19: 19% slower, the study's mean), and the collective this much longer.
  double overlap_compute_slowdown = 0;
  double overlap_comm_slowdown = 0;
  // The same beside a sharded strategy's collectives (reduce-scatter, all-gather), which
  // may contend otherwise than an all-reduce (docs/SIMULATE.md, "Contention by what
  // overlaps"); unset: as beside any other collective.
  std::optional<double> sharded_compute_slowdown, sharded_comm_slowdown;
  // Memory a sharded strategy gave back and touches again (fsdp's parameters gathered into
  // a unit it released, zero2/fsdp's gradients rewritten after their reduce-scatter) costs
  // its bytes at this rate on top: the operating system clears every page it hands back
  // (core/page_array.h). 0: free, as under a caching allocator (every datasheet profile);
  // calibration fits it where the measured runs gave memory back.
  double first_touch_bytes_per_s = 0;
  // Seconds the training thread spends giving one unit's memory back (zero2/fsdp's
  // gradients after their reduce-scatter, fsdp's parameters at their release: Note
  // [giving back, timed] in ddp/sharded.cpp). 0: none, as under a caching allocator (every
  // datasheet profile); calibration takes the measured median.
  double give_back_s = 0;
  // How far apart alike ranks' compute runs in a step: the standard deviation of a rank's
  // compute time in a step over its peers' mean, sqrt((compute_jitter x T)^2 +
  // compute_jitter_s^2) for a step of T seconds of compute (0.05 and 0.0005: 5% and half a
  // millisecond). The step waits for the slowest of the ranks, priced at its expectation
  // (Note [ranks apart] in simulator.cpp). 0: ranks alike (every datasheet profile, which
  // says nothing of it); calibration measures both parts.
  double compute_jitter = 0;
  double compute_jitter_s = 0;
  // The share of a collective's transfer through which the rank that issued it last, and
  // so set it moving, computes nothing: its communication thread took the core the rank
  // computes on (Note [the last issuer's core] in simulator.cpp). 0: a core, or a device,
  // of the communication's own (every datasheet profile); calibration measures it.
  double issuer_held = 0;
  std::string source;  // where the figures come from

  double peak(Precision precision) const;
  double weight_rate() const {
    return weight_bytes_per_s > 0 ? weight_bytes_per_s : memory_bytes_per_s;
  }
  // The slowdowns beside a collective of `kind` (a sharded one's where set).
  double compute_slowdown(SpanKind kind) const;
  double comm_slowdown(SpanKind kind) const;
};

// A device's rates as seconds per GEMM FLOP, per byte streamed and per byte of weights a
// product reads (DeviceProfile::weight_rate); 0: free.
struct PassRates {
  double flop_s = 0;
  double byte_s = 0;
  double weight_byte_s = 0;
};
// The seconds of a pass (Note [a GEMM's weights] in cluster.cpp): `flops` in all, of
// which `weight_flops` are products by weights that read `weight_bytes` of them, those in
// quadrature with their reads, the rest at the GEMM rate; `bytes` (besides those weights)
// at the memory bandwidth.
double pass_seconds(const PassRates& rates, double flops, double bytes, double weight_flops,
                    double weight_bytes);

// A sharded strategy's collectives: reduce-scatter and all-gather.
bool sharded_collective(SpanKind kind);

// A node whose links run below their profile: its intra-node link and its share of the
// network at these fractions of their bandwidth (latency unchanged).
struct DegradedLink {
  int node = 0;
  double intra = 1;    // (0, 1]
  double network = 1;  // (0, 1]

  // "node=3,network=0.5x" or "node=3,intra=0.25x,network=0.5"; throws UsageError naming
  // --degraded-link.
  static DegradedLink parse(std::string_view text);
};

struct Cluster {
  std::string name;  // as given
  int nodes = 1;
  int devices_per_node = 1;
  DeviceProfile device;
  LinkProfile intra;  // device to device inside a node (NVLink, Infinity Fabric)
  LinkProfile inter;  // a node's network, per NIC
  int nics_per_node = 1;
  std::vector<DegradedLink> degraded;

  int devices() const { return nodes * devices_per_node; }
  // The fraction of its bandwidth `node`'s intra link and network run at.
  double intra_factor(int node) const;
  double network_factor(int node) const;
  // One line: "8 x 8 H100-80GB (NVLink 450 GB/s, 8 x 50 GB/s network)".
  std::string describe() const;
};

// "8x8xh100-80gb", "8xh100", a built-in profile's name alone (one device), or a path to a
// JSON file. Throws UsageError naming --cluster.
Cluster parse_cluster(std::string_view text);
// The built-in device profiles' names, for --help and errors.
std::string builtin_profiles();

}  // namespace tandem
