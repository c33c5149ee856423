// The simulator tests' cluster: a device with round numbers, 1 TFLOP/s fp32 at efficiency
// 1, 1 TB/s of memory, links of 10 GB/s and 1 us within a node, 1 GB/s and 10 us between
// nodes (2 NICs per node), and optionally the overlap's contention factors.
#pragma once

#include "simulate/simulator.h"

namespace tandem::testing {

inline Cluster round_cluster(int nodes, int per_node, double compute_slow = 0,
                             double comm_slow = 0) {
  Cluster c;
  c.name = "test";
  c.nodes = nodes;
  c.devices_per_node = per_node;
  c.device.name = "round";
  c.device.peak_flops = {1e12, 1e12, 1e12, 1e12};
  c.device.memory_bytes_per_s = 1e12;
  c.device.memory_bytes = 1e12;
  c.device.gemm_efficiency = 1;
  c.device.overlap_compute_slowdown = compute_slow;
  c.device.overlap_comm_slowdown = comm_slow;
  c.intra = {.bandwidth_bytes_per_s = 10e9, .latency_s = 1e-6};
  c.inter = {.bandwidth_bytes_per_s = 1e9, .latency_s = 10e-6};
  c.nics_per_node = 2;
  return c;
}

}  // namespace tandem::testing
